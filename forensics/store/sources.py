"""The sources: listed (newest last), removed, or relabelled with another host or run.

A source is the unit of an ingest and of storage: its rows are its own shard files, so
removing or relabelling one touches exactly its files (listed anew in one transaction;
relabelled files are written anew), and the stored rows of the named views are
recomputed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from ..errors import ForensicsError
from ..parsers.tables import SHARDED, read_parquet
from .across import across_hosts
from .catalog import Catalog, open_catalog
from .database import (
    SCHEMA_VERSION,
    CommittedInterrupt,
    committing,
    connect_read_only,
    first_row,
    scalar,
    shard_root,
)
from .derived import STAMP, Deriver, refresh_derived
from .integrity import check, inside
from .points import reached
from .records import TABLES as RECORD_TABLES
from .records import _records_of
from .register import PATTERNS_KEY, _split, listed
from .register import _held as held_sides
from .renderings import LEVELS, Pairing, Side, compare, dups, take_from
from .shards import ShardWriter, list_files, rows_in
from .stage import arrow_batches, write_quarantine, write_query


def list_sources(db: str | os.PathLike | None = None) -> list[dict]:
    """Every source, oldest first; `damaged`: why one of its files is not the registered
    one (None when sound)."""
    con = connect_read_only(db, damaged_ok=True)
    try:
        damage = check(con, shard_root(con))
        why = {}
        for b in damage.files:
            why.setdefault(b.source_id, f"{b.path} {b.why}")
        # The time as ISO text in UTC: DuckDB before 2.0 needs pytz to hand out a
        # TIMESTAMPTZ as a Python datetime.
        rel = con.sql(
            "SELECT * REPLACE (strftime(ingested_at AT TIME ZONE 'UTC',"
            " '%Y-%m-%dT%H:%M:%S.%fZ') AS ingested_at) FROM sources ORDER BY source_id"
        )
        cols = rel.columns
        rows = [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
        for r in rows:
            r["damaged"] = why.get(r["source_id"])
        return rows
    finally:
        con.close()


def _holding(column: str) -> list[str]:
    """The sharded tables that carry `column`."""
    return [t.name for t in SHARDED.values() if column in t.names]


def _source(con: duckdb.DuckDBPyConnection, source_id: int) -> tuple[str, str]:
    row = first_row(con, "SELECT run, path FROM sources WHERE source_id = ?", [source_id])
    if row is None:
        known = con.execute("SELECT source_id FROM sources ORDER BY 1").fetchall()
        ids = ", ".join(str(r[0]) for r in known) or "none"
        raise ForensicsError(f"no source {source_id}; known: {ids}")
    return row


def _changed(cat: Catalog, derivers: Sequence[Deriver] = ()) -> None:
    """Rows moved under the views: their stored rows are recomputed (the data's
    fingerprint does not see a host change, so every stamp goes)."""
    con = cat.con
    cat.recheck()  # files moved: checked again, once
    cat.install()
    con.execute(f"DELETE FROM meta WHERE key LIKE '{STAMP}%'")
    con.execute(
        "DELETE FROM runs WHERE run NOT IN (SELECT run FROM sources) "
        "AND run NOT IN (SELECT run FROM results)"
    )  # a results file's header runs
    refresh_derived(con, derivers)


def _files(con: duckdb.DuckDBPyConnection, source_id: int) -> dict[str, list[Path]]:
    """A source's registered files by table; a path that leaves the shard folder is
    never one of them (never read, never deleted)."""
    root = shard_root(con)
    out: dict[str, list[Path]] = {}
    for path, table in con.execute(
        "SELECT path, table_name FROM shards WHERE source_id = ? ORDER BY path", [source_id]
    ).fetchall():
        f = inside(root, path)
        if f is not None:
            out.setdefault(table, []).append(f)
    return out


def _list(con: duckdb.DuckDBPyConnection, source_id: int, table: str, files: list[Path]) -> None:
    list_files(con, shard_root(con), source_id, table, files)


def _unlist(con: duckdb.DuckDBPyConnection, files: list[Path]) -> None:
    root = shard_root(con)
    for f in files:
        con.execute("DELETE FROM shards WHERE path = ?", [f.relative_to(root).as_posix()])


def _droppers(con: duckdb.DuckDBPyConnection, source_id: int) -> tuple[list, dict]:
    """The other sources that dropped entries as duplicates (perhaps of this one's), and
    their files; refused where one kept no copy of what it dropped. Any other source: a
    poorer rendering registered earlier gave its copies to a richer one registered later
    (renderings.py)."""
    later = con.execute(
        "SELECT s.source_id, s.duplicates, s.run FROM sources s WHERE s.source_id <> ? "
        "AND s.duplicates > 0 ORDER BY s.source_id",
        [source_id],
    ).fetchall()
    files = {sid: _files(con, sid) for sid, _, _ in later}
    unkept = [(sid, n) for sid, n, _ in later if not files[sid].get("dropped_entries")]
    if unkept:
        ids = ", ".join(f"{s} ({n:,})" for s, n in unkept)
        raise ForensicsError(
            f"source {source_id} cannot be removed: other sources dropped entries as "
            f"duplicates of stored ones, perhaps of its own, and kept no copy ({ids}: "
            "ingested before shards); remove those first"
        )
    return later, files


def remove_source(
    db: str | os.PathLike | None,
    source_id: int,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    derivers: Sequence[Deriver] = (),
) -> dict:
    """Every row of one source, gone. Entries that later sources dropped as duplicates of
    stored ones come back to them where no remaining source holds them (from the
    `dropped_entries` they kept); refused where a later source kept none (it was
    ingested by a pd-forensics before shards). `wait`: seconds to wait for the catalog
    while another process holds it."""
    cat = open_catalog(db, wait, waiting)
    con = cat.con
    gone: list[Path] = []
    committed = False
    try:
        run, path = _source(con, source_id)
        later, files = _droppers(con, source_id)
        mine = _files(con, source_id)
        removed = dict(con.execute(  # as registered: a damaged file may be gone
            "SELECT table_name, sum(rows)::BIGINT FROM shards WHERE source_id = ? GROUP BY 1",
            [source_id]).fetchall())  # fmt: skip
        restored: dict[int, int] = {}
        with committing(con):
            con.execute("DELETE FROM shards WHERE source_id = ?", [source_id])
            con.execute("DELETE FROM sources WHERE source_id = ?", [source_id])
            con.execute("DELETE FROM meta WHERE key = ?", [PATTERNS_KEY + str(source_id)])
            cat.install()
            for sid, _, srun in later:
                back, old = _restore(cat, sid, srun, files[sid]["dropped_entries"])
                if back:
                    restored[sid] = back
                gone += old
            reached("remove-unlisted")
            _changed(cat, derivers)
        committed = True  # files are deleted only now: an interrupted remove kept them
        gone += [f for fs in mine.values() for f in fs]
        out = {"source_id": source_id, "run": run, "path": path,
               "removed": {t: n for t, n in removed.items() if n}}  # fmt: skip
        if restored:
            out["restored"] = restored
        return out
    finally:
        cat.close()
        _delete(gone if committed else [])


def rewrite(
    con: duckdb.DuckDBPyConnection,
    source_id: int,
    table: str,
    files: list[Path],
    sets: dict[str, tuple[str, list]],
    done: tuple[list[Path], list[Path]],
) -> int:
    """One source's files of one table written anew with `sets` (column -> SQL and its
    parameters), listed in place of the old: the rows written. `done`: (old, new) files,
    extended for the caller to delete after its commit or on its failure."""
    writer = ShardWriter(files[0].parent, SCHEMA_VERSION)
    repl = ", ".join(f"{sql} AS {c}" for c, (sql, _) in sets.items())
    params = [v for _, ps in sets.values() for v in ps]
    rel = con.sql(f"SELECT * REPLACE ({repl}) FROM {read_parquet(files)}", params=params)
    for batch in arrow_batches(rel):
        writer.write(table, pa.Table.from_batches([batch]))
    writer.close()
    written = writer.paths(table)
    done[1].extend(written)
    _unlist(con, files)
    _list(con, source_id, table, written)
    done[0].extend(files)
    return sum(rows_in(f) for f in written)


def _runs_of(
    con: duckdb.DuckDBPyConnection, source_id: int, files: dict[str, list[Path]]
) -> list[str]:
    """The runs a source's rows are in: its own, and a results file's header runs."""
    runs = [r for (r,) in con.execute(
        "SELECT run FROM sources WHERE source_id = ?", [source_id]).fetchall()]  # fmt: skip
    if files.get("results"):
        sql = f"SELECT DISTINCT run FROM {read_parquet(files['results'])} ORDER BY 1"
        runs += [r for (r,) in con.execute(sql).fetchall()]
    return list(dict.fromkeys(r for r in runs if r is not None))


def merged_tags(con: duckdb.DuckDBPyConnection, runs: list[str]) -> dict[str, str]:
    """The runs' tags in one map, the later run's winning."""
    out: dict[str, str] = {}
    for r in runs:
        row = first_row(con, "SELECT tags FROM runs WHERE run = ?", [r])
        out.update(dict((row[0] if row else None) or {}))
    return out


def _delete(files: list[Path]) -> None:
    """Files no longer listed (after the commit: a reader that opened before it still
    read them); folders left empty too."""
    for f in files:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            f.unlink()
        if f.parent.is_dir() and not any(f.parent.iterdir()):
            f.parent.rmdir()


def restore_source(
    db: str | os.PathLike | None,
    source_id: int,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    derivers: Sequence[Deriver] = (),
) -> dict:
    """Every entry dedupe set aside in one source (its `dropped_entries`) back among its
    entries, whatever other source holds them too: the undo of a merge ingest or
    `dedupe` made."""
    cat = open_catalog(db, wait, waiting)
    con = cat.con
    gone: list[Path] = []
    committed = False
    try:
        run, path = _source(con, source_id)
        if damage := cat.damage.of(source_id):
            raise ForensicsError(damage.line())
        dropped = _files(con, source_id).get("dropped_entries", [])
        back = 0
        with committing(con):
            if dropped:
                back, gone = _restore(cat, source_id, run, dropped, compare_others=False)
                _changed(cat, derivers)
        committed = True
        return {"source_id": source_id, "path": path, "restored": back}
    finally:
        cat.close()
        _delete(gone if committed else [])


def dedupe_source(
    db: str | os.PathLike | None,
    source_id: int,
    against: int,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    derivers: Sequence[Deriver] = (),
) -> dict:
    """One source's entries that another holds, set aside in its `dropped_entries`: the
    same alignment as ingest's without the share test (`cat` and `short-monotonic` by
    message alone); `forensics sources restore` undoes it."""
    if source_id == against:
        raise ForensicsError("a source cannot be deduped against itself")
    cat = open_catalog(db, wait, waiting)
    con = cat.con
    try:
        _, path = _source(con, source_id)
        _source(con, against)
        root = shard_root(con)
        for sid in (source_id, against):
            if damage := cat.damage.of(sid):
                raise ForensicsError(damage.line())
        sides = held_sides(con, root, set())
        if source_id not in sides or against not in sides:
            return {"source_id": source_id, "against": against, "path": path, "dropped": 0}
        p = _forced(con, sides[source_id], sides[against])
        with committing(con):
            if p.merged:  # its old files go at the next writer's sweep
                twin = listed(con, root, against, "lines")
                take_from(con, root, source_id, p.mine, lambda c, w, t=twin: _split(c, w, t))
                _changed(cat, derivers)
        return {"source_id": source_id, "against": against, "path": path,
                "dropped": p.merged}  # fmt: skip
    finally:
        cat.close()


def _forced(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side) -> Pairing:
    """`dedupe`'s comparison: two journal renderings by their own rule; where either is a
    plain log or `cat` (a host that may differ, a multi-line entry where the other has
    one a line) by their lines in order, whatever their hosts (across.py)."""
    journals = {*LEVELS, "short-monotonic"}  # a journal's lines one an entry, as stored
    if mine.fmt in journals and theirs.fmt in journals:
        return compare(con, mine, theirs, forced=True)
    return across_hosts(con, mine, [theirs], forced=True)


def _restore(
    cat: Catalog,
    source_id: int,
    run: str,
    dropped: list[Path],
    compare_others: bool = True,
) -> tuple[int, list[Path]]:
    """A source's dropped entries that no remaining source holds (all of them, without
    `compare_others`), back among its entries (their records read again with the built-in
    patterns and the user patterns its ingest stored; the rows that stayed with them are
    not read twice). (entries restored, files no longer listed)."""
    con = cat.con
    writer = ShardWriter(dropped[0].parent, SCHEMA_VERSION)
    # a copy to work on: the listed files stay whole until the transaction commits
    write_query(
        con,
        writer,
        "entries",
        f"SELECT * FROM {read_parquet(dropped)} ORDER BY entry_no",
    )
    if compare_others:
        _leave_out_held(cat, source_id, writer)
    back, still = writer.paths("entries"), writer.paths("dropped_entries")
    n = sum(rows_in(f) for f in back)
    if n == 0:
        _delete(back + still)
        return 0, []
    frames, rejects = _records_again(cat, (source_id, run), back, writer)
    writer.close()
    _unlist(con, dropped)
    _list(con, source_id, "entries", back)
    _list(con, source_id, "dropped_entries", still)
    for kind in frames:
        table = RECORD_TABLES[kind]
        _list(con, source_id, table, writer.paths(table))
    if rejects:
        write_quarantine(writer, [(line, reason, raw, no) for no, line, reason, raw in rejects])
        writer.close()
        _list(con, source_id, "quarantine", writer.paths("quarantine")[-1:])
    con.execute(
        "UPDATE sources SET entries = entries + ?, duplicates = duplicates - ?, "
        "quarantined = quarantined + ? WHERE source_id = ?",
        [n, n, len(rejects), source_id],
    )
    cat.install()
    return n, dropped


def _records_again(
    cat: Catalog, source: tuple[int, str], back: list[Path], writer: ShardWriter
) -> tuple[dict, list]:
    """The records of the entries given back (`source`: its id and run), read as its
    ingest read them, less the rows that stayed with them; and the rejects."""
    source_id, run = source
    entries = cat.con.sql(
        "SELECT entry_no, line_first, host, ts_us, priority, message, fields FROM "
        f"{read_parquet(back)} ORDER BY entry_no"
    ).pl()
    frames, rejects = _records_of(entries, _stored_patterns(cat, source_id))
    for kind, df in frames.items():
        df = _not_kept(cat, source_id, RECORD_TABLES[kind], df)
        writer.write(RECORD_TABLES[kind], df.with_columns(run=pl.lit(run)).to_arrow())
    return frames, rejects


def _stored_patterns(cat: Catalog, source_id: int) -> list:
    """The user patterns the source was read with, as its ingest stored them."""
    from ..parsers.patterns import load_text

    row = first_row(
        cat.con, "SELECT value FROM meta WHERE key = ?", [PATTERNS_KEY + str(source_id)]
    )
    return load_text(row[0], f"source {source_id}'s patterns") if row else []


def _not_kept(cat: Catalog, source_id: int, table: str, df: pl.DataFrame) -> pl.DataFrame:
    """Records read again, less those of entries whose records stayed when they were set
    aside (a user's pattern's: register._split)."""
    files = listed(cat.con, cat.root, source_id, table)
    if not files or df.is_empty() or table == "lines":
        return df
    have = cat.con.sql(f"SELECT DISTINCT entry_no FROM {read_parquet(files)}").pl()["entry_no"]
    return df.filter(~pl.col("entry_no").is_in(have.implode()))


def _leave_out_held(cat: Catalog, source_id: int, writer: ShardWriter) -> None:
    """The entries being given back that another source still holds, split out again
    (the rule of each pair, as ingest applies it)."""
    fmt = scalar(cat.con, "SELECT format FROM sources WHERE source_id = ?", [source_id])
    for other in _sides(cat, skip=source_id):
        if not writer.paths("entries"):
            return
        p = compare(cat.con, Side(source_id, fmt, writer.paths("entries")), other)
        if p.merged:
            dups(cat.con, p.mine)
            _split(cat.con, writer, listed(cat.con, cat.root, other.sid, "lines"))


def _sides(cat: Catalog, skip: int) -> list[Side]:
    """The other sound sources' entries, as sides of a comparison."""
    return [s for sid, s in held_sides(cat.con, cat.root, cat.damage.sources).items()
            if sid != skip]  # fmt: skip


def _check_labels(host: str | None, run: str | None) -> None:
    if host is None and run is None:
        raise ForensicsError("relabel needs --host or --run")
    if any(v is not None and not v.strip() for v in (host, run)):
        raise ForensicsError("a host or run name cannot be empty")


def _to_run(con: duckdb.DuckDBPyConnection, source_id: int, run: str, held: list[str]) -> None:
    """The source in `run`, which keeps the tags of the runs its rows were in (a
    reproducer header's, the server's)."""
    tags = merged_tags(con, [*held, run])
    con.execute("INSERT INTO runs (run, tags) SELECT ?, ? WHERE NOT EXISTS "
                "(SELECT 1 FROM runs WHERE run = ?)", [run, tags, run])  # fmt: skip
    con.execute("UPDATE runs SET tags = ? WHERE run = ?", [tags, run])
    con.execute("UPDATE sources SET run = ? WHERE source_id = ?", [run, source_id])


def relabel_source(
    db: str | os.PathLike | None,
    source_id: int,
    host: str | None = None,
    run: str | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    derivers: Sequence[Deriver] = (),
) -> dict:
    """Give one source's rows another host (entries and records) and/or run: its files
    written anew with the new values, listed in place of the old in one transaction.
    `wait`: seconds to wait for the catalog while another process holds it."""
    _check_labels(host, run)
    cat = open_catalog(db, wait, waiting)
    con = cat.con
    old: list[Path] = []
    new: list[Path] = []
    try:
        old_run, path = _source(con, source_id)
        if damage := cat.damage.of(source_id):
            raise ForensicsError(damage.line())  # its files cannot be written anew
        changed: dict[str, int] = {}
        files = _files(con, source_id)
        try:
            with committing(con):
                held = _runs_of(con, source_id, files)
                for table, fs in files.items():
                    sets = {}
                    if host is not None and table in _holding("host"):
                        sets["host"] = ("?", [host])
                    if run is not None and table in _holding("run"):
                        sets["run"] = ("?", [run])
                    if sets:
                        n = rewrite(con, source_id, table, fs, sets, (old, new))
                        changed.update({f"{table}.{c}": n for c in sets})
                if run is not None:
                    _to_run(con, source_id, run, held)
                    changed["sources.run"] = 1
                reached("relabel-rewritten")
                _changed(cat, derivers)
        except CommittedInterrupt:
            raise  # committed: the new files are listed, the old ones go (finally)
        except BaseException:
            _delete(new)
            old = []
            raise
        return {"source_id": source_id, "path": path, "run": run or old_run,
                "changed": {k: n for k, n in changed.items() if n}}  # fmt: skip
    finally:
        cat.close()
        _delete(old)
