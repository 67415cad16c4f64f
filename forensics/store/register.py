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
from ..parsers.tables import SOURCE_OF_FILE, read_parquet
from .database import SCHEMA_VERSION, catalog_path, first_row, reinstall, scalar
from .integrity import check
from .records import COUNTED
from .records import TABLES as RECORD_TABLES
from .renderings import across
from .shards import ShardWriter, folder, list_files, registered, rows_in, source_folder, sweep
from .stage import IDENTITY, SourceResult, Staged, sql_path, write_query

# Candidates' message bytes compared in one pass of dedupe. The exact comparison joins
# candidates with the stored entries, messages included: a 3 GB source that repeats a
# stored 742 MB one (2.4 GB of candidates) ran out of memory in one join with DuckDB at
# 512 MB, and peaked at 1,302 MB RSS with 1 GB; in passes of 256 MB it fits in 512 MB
# (978 MB peak RSS, 173 s against 160 s in one pass). Passes of 64 MB: 264 s.
DEDUPE_PASS_BYTES = 256 << 20


def ensure_run(con: duckdb.DuckDBPyConnection, run: str, tags: dict[str, str]) -> None:
    row = first_row(con, "SELECT tags FROM runs WHERE run = ?", [run])
    if row is None:
        con.execute("INSERT INTO runs (run, tags) VALUES (?, ?)", [run, tags])
    elif tags:
        merged = {**(row[0] or {}), **tags}
        con.execute("UPDATE runs SET tags = ? WHERE run = ?", [merged, run])


def register(
    con: duckdb.DuckDBPyConnection, staged: list[Staged], run: str, tags: dict[str, str]
) -> tuple[list[SourceResult], list[Path]]:
    """Register `staged` in the caller's transaction: their results, and the folders moved
    into the shard folder (the caller removes them if the transaction does not commit).
    The tables' views follow the new files; the named ones are the caller's next step
    (refresh_derived)."""
    root = folder(catalog_path(con))
    sweep(root, set(registered(con)))
    damaged = check(con, root).sources  # not read: dedupe against the sound sources
    ensure_run(con, run, tags)
    moved: list[Path] = []
    out: list[SourceResult] = []
    held = [root / p for p in registered(con, "entries", damaged)]  # grows as sources register
    taken = dict(
        con.execute(  # run -> the source whose results it holds
            "SELECT run, min(source_id) FROM results WHERE run IS NOT NULL GROUP BY run"
        ).fetchall()
    )
    todo = [st for st in staged if st.result.status == "ingested" and st.folder is not None]
    shared = _shared_keys(con, todo, held)
    try:
        for st in staged:
            out.append(st.result)
            if st in todo:
                _one(con, st, run, tags, root, moved, (held, taken, set(damaged)), shared)
        reinstall(con, named=False)  # the caller's refresh_derived installs those
    except BaseException:
        for m in moved:
            shutil.rmtree(m, ignore_errors=True)
        raise
    finally:
        con.execute("DROP TABLE IF EXISTS _shared")
    return out, moved


def _shared_keys(con: duckdb.DuckDBPyConnection, todo: list[Staged], held: list[Path]) -> bool:
    """The dedupe keys that more than one source holds, this ingest's and the registered
    ones (`_shared`): one pass over every key, so that only a source holding such a key
    is compared entry by entry (each against all before it cost time in the square of the
    sources). Whether there is any."""
    files = [(i, Path(st.folder or "") / n) for i, st in enumerate(todo)
             for n in st.files.get("entries", [])]  # fmt: skip
    if not files or (len(todo) == 1 and not held):
        return False
    which = ", ".join(f"({sql_path(f)}, {i})" for i, f in files)
    con.execute(  # every new key once, with its source (read once, used twice below)
        f"""CREATE OR REPLACE TEMP TABLE _new AS
            SELECT DISTINCT p.key, w.src
            FROM {read_parquet([f for _, f in files], "filename = true")} p
            JOIN (VALUES {which}) w(file, src) ON p.filename = w.file"""
    )
    old = (f"SELECT key FROM {read_parquet(held)}" if held
           else "SELECT NULL::UBIGINT AS key")  # fmt: skip
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _shared AS
            SELECT key FROM _new GROUP BY key HAVING count(*) > 1
            UNION SELECT key FROM _new n SEMI JOIN ({old}) o ON n.key = o.key;
            DROP TABLE _new"""
    )
    return bool(scalar(con, "SELECT count(*) FROM _shared"))


def _one(
    con: duckdb.DuckDBPyConnection,
    st: Staged,
    run: str,
    tags: dict[str, str],
    root: Path,
    moved: list[Path],
    grows: tuple[list[Path], dict[str, int], set[int]],
    shared: bool,
) -> None:
    """One staged source into the catalog; `grows`: the entries' files dedupe compares
    with and the runs holding a results file's rows (each grows as sources register),
    and the damaged sources (checked once a registration)."""
    held, taken, damaged = grows
    res = st.result
    dup = first_row(con, "SELECT source_id, run FROM sources WHERE sha256 = ?", [st.sha256])
    if dup is not None:
        res.status = "skipped"
        res.reason = f"same content (sha256) as source {dup[0]} in run {dup[1]!r}"
        if check(con, root).sources & {dup[0]}:
            res.reason += f" (damaged: `forensics sources remove {dup[0]}` first)"
        shutil.rmtree(st.folder or "", ignore_errors=True)
        return
    sid = scalar(con, "SELECT coalesce(max(source_id), 0) + 1 FROM sources")
    _claim_runs(con, st, sid, taken)
    for name, own in st.headers.items():
        ensure_run(con, name, {**own, **tags})
    res.source_id = sid
    staged = Path(st.folder or "")
    writer = ShardWriter(staged, SCHEMA_VERSION)
    writer.files = {t: list(f) for t, f in st.files.items()}
    _dedupe(con, writer, res, root, sid, held if shared else [], damaged)
    target = _move_in(root, sid, staged)
    moved.append(target)
    for table, names in writer.files.items():
        files = [target / name for name in names]
        list_files(con, root, sid, table, files)
        if table == "entries":
            held += files  # the next source dedupes against this one
    con.execute(
        """INSERT INTO sources (source_id, run, path, sha256, bytes, format, compression, lines,
                                entries, duplicates, rejoined, quarantined, markers, notes)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            sid, run, st.path, st.sha256, res.bytes, res.format, res.compression, res.lines,
            res.entries, res.duplicates, res.rejoined, res.quarantined, st.markers, res.notes,
        ],
    )  # fmt: skip


def _dedupe(con: duckdb.DuckDBPyConnection, writer: ShardWriter, res: SourceResult,
            root: Path, sid: int, held: list[Path], damaged: set[int]) -> None:  # fmt: skip
    """The staged source's copies of registered entries dropped: exactly (`held`: the
    registered entries' files, when a key is shared), then across renderings."""
    if not writer.files.get("entries"):
        return
    if held and _holds_shared(con, writer):
        against = (f"(SELECT *, {SOURCE_OF_FILE} AS source_id "
                   f"FROM {read_parquet(held, 'filename = true')})")  # fmt: skip
        if dropped := drop_duplicates(con, writer, against=against):
            _recount(writer, res, dropped)
    dropped, said = across(con, writer, res.format, root, damaged, _split, sid)
    if dropped:
        _recount(writer, res, dropped)
    res.notes = [*res.notes, *said]


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


def _holds_shared(con: duckdb.DuckDBPyConnection, writer: ShardWriter) -> bool:
    return bool(
        scalar(
            con,
            f"""SELECT count(*) FROM (SELECT key FROM {read_parquet(writer.paths("entries"))}
            SEMI JOIN _shared USING (key))""",
        )
    )


def drop_duplicates(
    con: duckdb.DuckDBPyConnection, writer: ShardWriter, against: str = "entries"
) -> int:
    """Drop the staged source's entries that a registered source already holds
    (overlapping exports); they go to its `dropped_entries` file, their records and
    quarantined records with them. Entries dropped.

    Identity is the tuple of what an entry says, compared exactly (the hash only finds
    candidates). A source may repeat an identical entry (same second, same text); so may
    the stored ones: an entry is dropped only up to the count one stored source already
    holds (multiset overlap). Candidates are compared in passes over key ranges (key
    modulo the number of passes), each about DEDUPE_PASS_BYTES of messages.
    `against`: the relation of registered entries (a view of `entries`).
    """
    new = read_parquet(writer.paths("entries"))
    cols = IDENTITY.split(", ")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _cand AS
            SELECT s.entry_no, s.key, strlen(s.message) AS size
            FROM {new} s SEMI JOIN (SELECT key FROM {against}) e ON s.key = e.key"""
    )
    n_cand, size = first_row(con, "SELECT count(*), coalesce(sum(size), 0) FROM _cand")
    if not n_cand:
        con.execute("DROP TABLE _cand")
        return 0
    passes = max(1, -(-int(size) // DEDUPE_PASS_BYTES))
    eq = " AND ".join(f"e.{c} IS NOT DISTINCT FROM c.{c}" for c in cols)
    con.execute("CREATE OR REPLACE TEMP TABLE _dups (entry_no BIGINT)")
    for part in range(passes):
        # Copies of one key fall in one pass: counting them per key stays whole.
        con.execute(
            f"""
            INSERT INTO _dups
            WITH c AS (
                SELECT s.entry_no, s.key, {", ".join(f"s.{c}" for c in cols)}
                FROM {new} s SEMI JOIN _cand k
                  ON k.entry_no = s.entry_no AND k.key % {passes} = {part}
            ), held AS (
                SELECT entry_no, max(n) AS held FROM (
                    SELECT c.entry_no, e.source_id, count(*) AS n
                    FROM c JOIN (SELECT * FROM {against} WHERE key % {passes} = {part}) e
                      ON e.key = c.key AND {eq}
                    GROUP BY ALL
                ) GROUP BY entry_no
            ), ranked AS (
                -- The k-th copy in this source goes when another source holds k or more.
                -- Copies are counted per key, not per whole identity (a window over the
                -- messages themselves ran out of memory): two identities sharing a key
                -- only count each other's copies (fewer drop); `held` is exact, so no
                -- entry that no other source holds is ever dropped.
                SELECT c.entry_no, h.held,
                       row_number() OVER (PARTITION BY c.key ORDER BY c.entry_no) AS occ
                FROM c JOIN held h USING (entry_no)
            )
            SELECT entry_no FROM ranked WHERE occ <= held
            """
        )
    n = scalar(con, "SELECT count(*) FROM _dups")
    con.execute("DROP TABLE _cand")
    if n:
        _split(con, writer)
    con.execute("DROP TABLE _dups")
    return n


def _split(con: duckdb.DuckDBPyConnection, writer: ShardWriter) -> None:
    """The staged files without the rows of `_dups`' entries; the entries themselves to
    `dropped_entries`."""
    old = writer.paths("entries")
    src = read_parquet(old)
    write_query(con, writer, "dropped_entries",
                f"SELECT * FROM {src} WHERE entry_no IN (SELECT entry_no FROM _dups) "
                "ORDER BY entry_no")  # fmt: skip
    for table in ("entries", *RECORD_TABLES.values(), "quarantine"):
        files = writer.paths(table)
        if not files:
            continue
        cond, order = "entry_no NOT IN (SELECT entry_no FROM _dups)", "entry_no"
        if table == "quarantine":  # a reader's own rejects name no entry
            cond, order = f"(entry_no IS NULL OR {cond})", "line"
        new = write_query(con, writer, table,
                          f"SELECT * FROM {read_parquet(files)} WHERE {cond} "
                          f"ORDER BY {order}")  # fmt: skip
        writer.replace(table, new)
