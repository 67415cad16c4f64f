"""Staged sources into the catalog, in one transaction of the writer that holds it: the
same content skipped, overlap with registered sources dropped (kept apart, so that it can
be restored), the folder renamed to its source id, its files listed, the views and their
stored rows brought up to date.

Sources register in input order, each against those registered before it (this ingest's
earlier ones included), so the result is the same whatever order the workers finished in.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb

from ..errors import ForensicsError
from ..parsers.patterns import builtin_names
from ..parsers.tables import read_parquet
from .across import across_hosts, across_note
from .catalog import Catalog
from .database import SCHEMA_VERSION, first_row, scalar
from .points import reached
from .records import COUNTED
from .records import TABLES as RECORD_TABLES
from .renderings import LEVELS, NEVER, Side, compare, dups, notes_for, offset, repeats, take_from
from .shards import ShardWriter, list_files, registered, rows_in, source_folder, sweep
from .stage import KEY, SourceResult, Staged, sql_path, write_query

PATTERNS_KEY = "patterns:"  # meta's key for a source's user patterns: + its id


def ensure_run(con: duckdb.DuckDBPyConnection, run: str, tags: dict[str, str]) -> None:
    row = first_row(con, "SELECT tags FROM runs WHERE run = ?", [run])
    if row is None:
        con.execute("INSERT INTO runs (run, tags) VALUES (?, ?)", [run, tags])
    elif tags:
        merged = {**(row[0] or {}), **tags}
        con.execute("UPDATE runs SET tags = ? WHERE run = ?", [merged, run])


def register(
    cat: Catalog, staged: list[Staged], run: str, tags: dict[str, str]
) -> tuple[list[SourceResult], list[Path]]:
    """Register `staged` in the catalog's transaction: their results, and the folders
    moved into the shard folder (the caller removes them if the transaction does not
    commit). The tables' views follow the new files (integrity checked again after the
    moves); the named ones are the caller's next step (refresh_derived)."""
    con, root = cat.con, cat.root
    sweep(root, set(registered(con)))
    damaged = cat.damage.sources  # as checked at open: dedupe against the sound sources
    ensure_run(con, run, tags)
    moved: list[Path] = []
    out: list[SourceResult] = []
    held = _held(con, root, damaged)  # grows as sources register
    taken = dict(
        con.execute(  # run -> the source whose results it holds
            "SELECT run, min(source_id) FROM results WHERE run IS NOT NULL GROUP BY run"
        ).fetchall()
    )
    todo = [st for st in staged if st.result.status == "ingested" and st.folder is not None]
    _shared_keys(con, todo, held)
    out = [st.result for st in staged]
    # a source whose host is a guess goes after those that know theirs: it is aligned
    # against all of them at once (across.py)
    order = [st for st in todo if not st.guessed] + [st for st in todo if st.guessed]
    try:
        for st in order:
            _one(con, st, run, tags, root, moved, (held, taken, damaged))
        cat.recheck()
        cat.install(named=False)  # the caller's refresh_derived installs those
    except BaseException:
        for m in moved:
            shutil.rmtree(m, ignore_errors=True)
        raise
    finally:
        con.execute("DROP TABLE IF EXISTS _shared; DROP TABLE IF EXISTS _holders")
    return out, moved


def _held(con: duckdb.DuckDBPyConnection, root: Path, damaged: set[int]) -> dict[int, Side]:
    """The sound registered sources that hold entries, as sides of a comparison."""
    out: dict[int, Side] = {}
    for sid, fmt, path in con.execute(
        """SELECT s.source_id, s.format, h.path FROM shards h JOIN sources s USING (source_id)
           WHERE h.table_name = 'entries' ORDER BY s.source_id, h.path"""
    ).fetchall():
        if sid not in damaged:
            out.setdefault(sid, Side(sid, fmt, [])).files.append(root / path)
    return out


def _key_from(con: duckdb.DuckDBPyConnection) -> int:
    """The first source whose stored key is KEY's hash; an older catalog's sources are
    keyed on the fly (once set, the mark stays)."""
    row = first_row(con, "SELECT value FROM meta WHERE key = 'entry_key_from'")
    if row is not None:
        return int(row[0])
    first = scalar(con, "SELECT coalesce(max(source_id), 0) + 1 FROM sources")
    con.execute("INSERT INTO meta VALUES ('entry_key_from', ?)", [str(first)])
    return first


def _shared_keys(con: duckdb.DuckDBPyConnection, todo: list[Staged], held: dict) -> None:
    """The dedupe keys that more than one source holds, this ingest's and the registered
    ones (`_shared`), and which registered source holds each (`_holders`): one pass over
    every key, so that a source is compared only with those that share a key (each
    against all before it cost time in the square of the sources)."""
    files = [(i, Path(st.folder or "") / n) for i, st in enumerate(todo)
             for n in st.files.get("entries", [])]  # fmt: skip
    con.execute("CREATE OR REPLACE TEMP TABLE _shared (key UBIGINT)")
    con.execute("CREATE OR REPLACE TEMP TABLE _holders (key UBIGINT, source_id BIGINT)")
    first = _key_from(con)  # marked by the first registration, whatever it holds
    if not files or (len(todo) == 1 and not held):
        return
    which = ", ".join(f"({sql_path(f)}, {i})" for i, f in files)
    con.execute(  # every new key once, with its source (read once, used twice below)
        f"""CREATE OR REPLACE TEMP TABLE _new AS
            SELECT DISTINCT p.key, w.src
            FROM {read_parquet([f for _, f in files], "filename = true")} p
            JOIN (VALUES {which}) w(file, src) ON p.filename = w.file"""
    )
    # only the registered keys this ingest holds too: never every stored key at once
    for sid, side in held.items():
        key = "key" if sid >= first else f"hash({KEY})"
        con.execute(f"""INSERT INTO _holders SELECT DISTINCT k.key, {sid} FROM
                        (SELECT {key} AS key FROM {read_parquet(side.files)}) k
                        SEMI JOIN _new n ON k.key = n.key""")
    con.execute("""INSERT INTO _shared
                   SELECT key FROM _new GROUP BY key HAVING count(*) > 1
                   UNION SELECT key FROM _holders;
                   DROP TABLE _new""")


def _one(
    con: duckdb.DuckDBPyConnection,
    st: Staged,
    run: str,
    tags: dict[str, str],
    root: Path,
    moved: list[Path],
    grows: tuple[dict[int, Side], dict[str, int], frozenset[int]],
) -> None:
    """One staged source into the catalog; `grows`: the registered sources dedupe compares
    with and the runs holding a results file's rows (each grows as sources register), and
    the damaged sources."""
    held, taken, damaged = grows
    res = st.result
    if _a_copy(con, st, damaged):
        return
    sid = scalar(con, "SELECT coalesce(max(source_id), 0) + 1 FROM sources")
    _claim_runs(con, st, sid, taken)
    for name, own in st.headers.items():
        ensure_run(con, name, {**own, **tags})
    res.source_id = sid
    if st.patterns:  # what `sources restore` reads its entries with again
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [PATTERNS_KEY + str(sid),
                                                                  st.patterns])  # fmt: skip
    staged = Path(st.folder or "")
    writer = ShardWriter(staged, SCHEMA_VERSION)
    writer.files = {t: list(f) for t, f in st.files.items()}
    _dedupe(con, writer, res, root, (sid, st.guessed), held)
    target = _move_in(root, sid, staged)
    moved.append(target)
    reached("source-moved-in")
    for table, names in writer.files.items():
        list_files(con, root, sid, table, [target / name for name in names])
    if names := writer.files.get("entries"):
        held[sid] = Side(sid, res.format, [target / n for n in names], st.guessed)
        con.execute(f"""INSERT INTO _holders SELECT DISTINCT key, {sid}
                        FROM {read_parquet(held[sid].files)} SEMI JOIN _shared USING (key)""")
    con.execute(
        """INSERT INTO sources (source_id, run, path, sha256, bytes, format, compression, lines,
                                entries, duplicates, rejoined, quarantined, markers, notes)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            sid, run, st.path, st.sha256, res.bytes, res.format, res.compression, res.lines,
            res.entries, res.duplicates, res.rejoined, res.quarantined, st.markers, res.notes,
        ],
    )  # fmt: skip


def _a_copy(con: duckdb.DuckDBPyConnection, st: Staged, damaged: frozenset[int]) -> bool:
    """Whether a registered source has the same content (the staged one skipped, said)."""
    dup = first_row(con, "SELECT source_id, run FROM sources WHERE sha256 = ?", [st.sha256])
    if dup is None:
        return False
    res = st.result
    res.status = "skipped"
    res.reason = f"already ingested as source {dup[0]} in run {dup[1]} (same sha256)"
    if dup[0] in damaged:
        res.reason += f" (damaged: `forensics sources remove {dup[0]}` first)"
    shutil.rmtree(st.folder or "", ignore_errors=True)
    return True


def _dedupe(con: duckdb.DuckDBPyConnection, writer: ShardWriter, res: SourceResult,
            root: Path, me: tuple[int, bool], held: dict[int, Side]) -> None:  # fmt: skip
    """The staged source against every registered source it shares a key with, by the
    rule of the pair (renderings.py): its copies dropped, or the registered source's where
    this one is the richer; a source whose host is a guess against every host of one
    that knows its hosts (across.py); the pairs no rule merges, said."""
    if not writer.files.get("entries"):
        return
    sid, guessed = me
    notes: list[str] = []
    if guessed:
        notes += _across(con, (writer, root), res,
                         Side(sid, res.format, writer.paths("entries"), True), held)  # fmt: skip
    sharing = _sharing(con, writer)
    for other in list(held.values()):
        if not writer.paths("entries"):
            break  # every entry went: nothing left to compare
        if not other.files:
            continue  # a source whose entries a richer one took, every one
        mine = Side(sid, res.format, writer.paths("entries"), guessed)
        if mine.guessed != other.guessed:  # a guess is aligned across hosts above; a
            continue  # guess registers after the sources that know their hosts
        if other.sid not in sharing:
            if (
                mine.fmt in NEVER
                or other.fmt in NEVER
                or not (mine.fmt in LEVELS and other.fmt in LEVELS)
            ):
                notes += repeats(con, mine, other)  # a plain log's host may differ too
            elif mine.fmt != other.fmt and mine.fmt in LEVELS and other.fmt in LEVELS:
                notes += offset(con, mine, other)
            continue
        p = compare(con, mine, other)
        if p.merged and mine.richness > other.richness:
            mine_lines = writer.paths("lines")
            take_from(con, root, other.sid, p.theirs,
                      lambda c, w, twin=mine_lines: _split(c, w, twin))  # fmt: skip
            held[other.sid] = _held(con, root, set()).get(other.sid, Side(other.sid, other.fmt, []))
            notes += notes_for(p, mine, other, other.sid)
        elif p.merged:
            dups(con, p.mine)
            _split(con, writer, listed(con, root, other.sid, "lines"))
            _recount(writer, res, p.merged)
            notes += notes_for(p, mine, other, sid)
        else:
            notes += notes_for(p, mine, other, sid) or repeats(con, mine, other)
    res.notes = [*res.notes, *notes]


def _sharing(con: duckdb.DuckDBPyConnection, writer: ShardWriter) -> set[int]:
    """The registered sources that hold a key of the staged source's entries."""
    if not writer.paths("entries"):  # every entry went
        return set()
    return {r for (r,) in con.execute(
        f"""SELECT DISTINCT h.source_id FROM _holders h
            SEMI JOIN (SELECT key FROM {read_parquet(writer.paths("entries"))}) k
              ON h.key = k.key""").fetchall()}  # fmt: skip


def _across(con: duckdb.DuckDBPyConnection, where: tuple[ShardWriter, Path], res: SourceResult,
            mine: Side, held: dict[int, Side]) -> list[str]:  # fmt: skip
    """A staged source whose host is a guess against every source that knows its hosts,
    at once: the entries they hold go from it (`where`: its writer, the shard folder)."""
    writer, root = where
    known = [s for s in held.values() if not s.guessed and s.files]
    p = across_hosts(con, mine, known)
    if not p.merged:
        return [n for k in known for n in repeats(con, mine, k)]
    dups(con, p.mine)
    _split(con, writer, [f for k in known for f in listed(con, root, k.sid, "lines")])
    _recount(writer, res, p.merged)
    return [across_note(p, mine.sid)]


def _move_in(root: Path, sid: int, staged: Path) -> Path:
    """The staged folder renamed into the shard folder as the source's own."""
    target = source_folder(root, sid)
    if target.is_symlink():  # never followed: the link goes, not what it names
        target.unlink()
    elif target.exists():  # an unregistered leftover that sweep could not take
        shutil.rmtree(target)
    os.rename(staged, target)
    return target


def _recount(writer: ShardWriter, res: SourceResult, dropped: int) -> None:
    """A source's counts after its copies of held entries were dropped."""
    res.duplicates += dropped
    res.entries -= dropped
    for kind in COUNTED:
        res.records[kind] = sum(rows_in(p) for p in writer.paths(RECORD_TABLES[kind]))
    res.quarantined = sum(rows_in(p) for p in writer.paths("quarantine"))


def _claim_runs(
    con: duckdb.DuckDBPyConnection, st: Staged, sid: int, taken: dict[str, int]
) -> None:
    """A results file's runs are its own: one already holding another file's results is
    refused (two reproducer runs merged silently would be judged as one)."""
    files = [Path(st.folder or "") / n for n in st.files.get("results", [])]
    if not files:
        return
    runs = [r for (r,) in con.execute(
        f"SELECT DISTINCT run FROM {read_parquet(files)} ORDER BY run").fetchall()]  # fmt: skip
    for r in runs:
        if r in taken:
            other = scalar(con, "SELECT path FROM sources WHERE source_id = ?", [taken[r]])
            held = f"source {taken[r]}, {other}" if other else "an earlier input of this ingest"
            raise ForensicsError(
                f"{st.path}: run {r!r} already holds the results of {held}; "
                "name this file's run with --run (or merge them later: `forensics runs merge`)"
            )
    taken.update(dict.fromkeys(runs, sid))


def _split(
    con: duckdb.DuckDBPyConnection,
    writer: ShardWriter,
    twin_lines: list[Path] = (),  # type: ignore[assignment]
) -> None:
    """The staged files without the rows of `_dups`' entries; the entries themselves to
    `dropped_entries`. The records a user's pattern made stay, with their entries set
    aside, unless the twin (`twin_lines`: its `lines` files) was read with that pattern
    too: set aside, they would be lost (the twin has no such rows)."""
    old = writer.paths("entries")
    src = read_parquet(old)
    write_query(con, writer, "dropped_entries",
                f"SELECT * FROM {src} WHERE entry_no IN (SELECT entry_no FROM _dups) "
                "ORDER BY entry_no")  # fmt: skip
    kept = _kept_entries(con, writer.paths("lines"), list(twin_lines))
    for table in ("entries", *RECORD_TABLES.values(), "quarantine"):
        files = writer.paths(table)
        if not files:
            continue
        cond, order = "entry_no NOT IN (SELECT entry_no FROM _dups)", "entry_no"
        if table == "quarantine":  # a reader's own rejects name no entry
            cond, order = f"(entry_no IS NULL OR {cond})", "line"
        elif kept and table not in ("entries", "lines"):
            cond = f"({cond} OR entry_no IN (SELECT entry_no FROM _kept))"
        new = write_query(con, writer, table,
                          f"SELECT * FROM {read_parquet(files)} WHERE {cond} "
                          f"ORDER BY {order}")  # fmt: skip
        writer.replace(table, new)


def user_patterns(con: duckdb.DuckDBPyConnection, lines: list[Path]) -> set[str]:
    """The user's patterns that read lines of these `lines` files."""
    if not lines:
        return set()
    names = {n for (n,) in con.execute(
        f"SELECT DISTINCT pattern FROM {read_parquet(lines)} WHERE pattern IS NOT NULL "
        "AND NOT starts_with(pattern, 'forensics:')").fetchall()}  # fmt: skip
    return names - builtin_names()


def _kept_entries(con: duckdb.DuckDBPyConnection, lines: list[Path], twin_lines: list[Path]
                  ) -> bool:  # fmt: skip
    """`_kept`: the entries set aside whose records stay (read by a user's pattern the
    twin was not read with); whether there is any."""
    kept = user_patterns(con, lines)
    kept = kept - user_patterns(con, twin_lines) if kept else kept
    if not kept:
        return False
    listed = ", ".join("'" + k.replace("'", "''") + "'" for k in sorted(kept))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _kept AS SELECT DISTINCT entry_no
                    FROM {read_parquet(lines)} WHERE pattern IN ({listed})
                      AND entry_no IN (SELECT entry_no FROM _dups)""")  # fmt: skip
    return True


def listed(con: duckdb.DuckDBPyConnection, root: Path, sid: int, table: str) -> list[Path]:
    """A registered source's files of one table."""
    return [root / p for (p,) in con.execute(
        "SELECT path FROM shards WHERE source_id = ? AND table_name = ? ORDER BY path",
        [sid, table]).fetchall()]  # fmt: skip
