"""The runs: listed, renamed, merged (`forensics runs`). A run's rows are spread over the
sources that hold them (a journal's by its --run, a results file's by its headers): a
rename writes those files anew with the new name, in one transaction, tags kept."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import ForensicsError
from ..parsers.tables import read_parquet
from .catalog import open_catalog
from .database import CommittedInterrupt, committing
from .derived import Deriver
from .sources import _changed, _delete, _files, _holding, merged_tags, rewrite


def rename_run(
    db: str | os.PathLike | None,
    old: str,
    new: str,
    merge: bool = False,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    derivers: Sequence[Deriver] = (),
) -> dict:
    """Every row of run `old` moved to run `new` (its tags kept; a merge into an existing
    run keeps both runs' tags, the existing run's winning where they differ)."""
    if not new.strip():
        raise ForensicsError("a run name cannot be empty")
    cat = open_catalog(db, wait, waiting)
    con = cat.con
    gone: list[Path] = []
    written: list[Path] = []
    try:
        known = _checked(con, old, new, merge)
        damaged = cat.damage.sources
        changed: dict[str, int] = {}
        try:
            with committing(con):
                tags = merged_tags(con, [old, new])
                for sid in _holders(con, old):
                    if sid in damaged:
                        raise ForensicsError(cat.damage.of(sid).line())
                    _move(con, sid, old, new, changed, (gone, written))
                con.execute(
                    "INSERT INTO runs (run, tags, created) SELECT ?, ?, created FROM runs "
                    "WHERE run = ? AND NOT EXISTS (SELECT 1 FROM runs WHERE run = ?)",
                    [new, tags, old, new],
                )
                con.execute("UPDATE runs SET tags = ? WHERE run = ?", [tags, new])
                con.execute("UPDATE sources SET run = ? WHERE run = ?", [new, old])
                con.execute("DELETE FROM runs WHERE run = ?", [old])
                _changed(cat, derivers)
        except CommittedInterrupt:
            raise  # committed: what was written is listed, the old files go (finally)
        except BaseException:
            _delete(written)
            gone = []
            raise
        return {"run": old, "into": new, "merged": merge and new in known, "tags": tags,
                "changed": {k: n for k, n in changed.items() if n}}  # fmt: skip
    finally:
        cat.close()
        _delete(gone)


def _checked(con, old: str, new: str, merge: bool) -> list[str]:
    """The runs there are, once `old` is one and `new` is free (or merged into)."""
    known = [r for (r,) in con.execute("SELECT run FROM runs ORDER BY created").fetchall()]
    if old not in known:
        raise ForensicsError(f"no run named {old!r}; known: {', '.join(known) or 'none'}")
    if new in known and not merge:
        raise ForensicsError(f"run {new!r} exists: `forensics runs merge {old} {new}` "
                             "puts both in one")  # fmt: skip
    if new == old:
        raise ForensicsError(f"run {old!r} is already called that")
    return known


def _holders(con, run: str) -> list[int]:
    """The sources with a row in `run` (by the run column of any table they hold)."""
    out = []
    for sid in [s for (s,) in con.execute("SELECT source_id FROM sources ORDER BY 1").fetchall()]:
        files = _files(con, sid)
        for table in _holding("run"):
            fs = files.get(table)
            if (
                fs
                and con.execute(
                    f"SELECT count(*) FROM {read_parquet(fs)} WHERE run = ?", [run]
                ).fetchall()[0][0]
            ):
                out.append(sid)
                break
    return out


def _move(con, sid: int, old: str, new: str, changed: dict, done: tuple) -> None:
    files = _files(con, sid)
    for table in _holding("run"):
        fs = files.get(table)
        if not fs:
            continue
        n = con.execute(f"SELECT count(*) FROM {read_parquet(fs)} WHERE run = ?", [old]).fetchall()
        if not n[0][0]:
            continue
        case = ("CASE WHEN run = ? THEN ? ELSE run END", [old, new])
        rewrite(con, sid, table, fs, {"run": case}, done)
        changed[f"{table}.run"] = changed.get(f"{table}.run", 0) + n[0][0]


def tag_runs(db: str | os.PathLike, runs: list[str], tags: dict[str, str]) -> None:
    """Add `tags` to each of `runs` (an experiment's decision, once it is known)."""
    from .register import ensure_run

    with open_catalog(db) as cat, cat.committing():
        for run in runs:
            ensure_run(cat.con, run, tags)
