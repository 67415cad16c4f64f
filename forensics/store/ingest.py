"""Ingest: inputs -> readers -> one DuckDB transaction, with dedupe, rejoin and quarantine."""

from __future__ import annotations

import gc
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from ..errors import ForensicsError
from ..parsers.formats import FORMATS, read_stream, sniff_input
from ..parsers.journald import (
    JournalctlFailed,
    JournalctlMissing,
    ReadContext,
    UnknownFormat,
    read_journal_file,
)
from ..parsers.journald.text import TEXT_FORMATS
from ..parsers.patterns import Pattern, PatternError
from ..parsers.patterns import load_file as load_patterns
from ..parsers.results import RESULT_FORMATS, NotResults, read_results
from ..parsers.tables import RESULTS
from .database import (
    ENTRY_COLUMNS,
    INGEST_MEMORY_LIMIT,
    WHOLE_SOURCE_MEMORY_LIMIT,
    connect,
    db_path,
    first_row,
    scalar,
    transaction,
)
from .derived import refresh_derived
from .inputs import Input, Opened, expand, not_a_log, open_input
from .records import TABLES as RECORD_TABLES
from .records import RecordSink

YEARS = (1970, 9999)  # what --year may be: journald's clock starts at the epoch
LINE_MAX = 48 * 1024  # journald's default LineMax: a longer stdout line is split there
_IDENTITY = "cursor, boot_id, mono_us, host, ts_us, unit, ident, pid, message"


@dataclass
class SourceResult:
    name: str
    format: str
    status: str  # ingested | skipped
    compression: str | None = None
    source_id: int | None = None
    entries: int = 0
    duplicates: int = 0
    rejoined: int = 0
    quarantined: int = 0
    lines: int = 0
    bytes: int = 0
    notes: list[str] = field(default_factory=list)
    reason: str = ""
    records: dict[str, int] = field(default_factory=dict)  # forensic records per kind


@dataclass
class IngestResult:
    db: Path
    run: str
    sources: list[SourceResult]

    @property
    def source_ids(self) -> list[int]:
        return [s.source_id for s in self.sources if s.source_id is not None]


ProgressFactory = Callable[[Input, int | None], Callable[[int], None] | None]


def ingest(
    paths: list[str],
    db: str | os.PathLike | None = None,
    *,
    run: str = "default",
    tags: dict[str, str] | None = None,
    fmt: str | None = None,
    year: int | None = None,
    host: str | None = None,
    patterns: list[str | os.PathLike] | None = None,
    progress: ProgressFactory | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> IngestResult:
    """Read every path into the database in one transaction; all or nothing.

    `patterns`: pattern files (TOML) for a fork's own lines, checked before anything is read.
    `wait`: seconds to wait for another writer (an ingest) to finish with the file;
    `waiting` is called once when the wait begins.
    """
    if year is not None and not YEARS[0] <= year <= YEARS[1]:
        raise ForensicsError(f"--year {year} is outside {YEARS[0]}-{YEARS[1]}")
    if fmt is not None and fmt not in FORMATS:
        raise ForensicsError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    try:
        user = [p for f in patterns or [] for p in load_patterns(f)]
    except PatternError as exc:
        raise ForensicsError(str(exc)) from None
    path = db_path(db)
    inputs = expand(paths, skip=(path, path.with_name(path.name + ".wal")))
    created = not path.exists()
    con = connect(path, wait, waiting)
    results: list[SourceResult] = []
    # Readers make millions of short-lived, acyclic objects (json dicts, field tuples):
    # refcounting frees them; the cycle collector only spends time (22 % of json reading).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    # One DuckDB thread: a second one gained no wall time on an append (it spent twice the
    # CPU for it), and the parsing threads need that core.
    con.execute("SET threads = 1")
    try:
        with transaction(con):
            _ensure_run(con, run, tags or {})
            for inp in inputs:
                cb = progress(inp, _size(inp)) if progress else None
                results.append(_ingest_one(con, inp, run, tags or {}, fmt, year, host, cb, user))
            # the answers' views over the new data, stored in the same transaction; the
            # queries are joins and aggregates that use both cores
            con.execute("RESET threads")
            refresh_derived(con)
    except BaseException:
        con.close()
        if created:
            for p in (path, path.with_name(path.name + ".wal")):
                p.unlink(missing_ok=True)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()
    con.close()
    return IngestResult(path, run, results)


def _size(inp: Input) -> int | None:
    return inp.path.stat().st_size if inp.path else None


def _ensure_run(con: duckdb.DuckDBPyConnection, run: str, tags: dict[str, str]) -> None:
    row = first_row(con, "SELECT tags FROM runs WHERE run = ?", [run])
    if row is None:
        con.execute("INSERT INTO runs (run, tags) VALUES (?, ?)", [run, tags])
    elif tags:
        merged = {**(row[0] or {}), **tags}
        con.execute("UPDATE runs SET tags = ? WHERE run = ?", [merged, run])


def _batches(opened: Opened, inp: Input, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    if fmt != "journal":
        return read_stream(opened.stream, fmt, ctx)
    if inp.path is not None and opened.compression is None:
        return read_journal_file(inp.path, ctx)
    return _journal_via_temp(opened, ctx)


def _journal_via_temp(opened: Opened, ctx: ReadContext) -> Iterator[pa.Table]:
    """journalctl needs a file: a compressed or piped .journal is written out first."""
    with tempfile.TemporaryDirectory(prefix="forensics-") as tmp:
        target = Path(tmp) / "input.journal"
        with open(target, "wb") as out:
            shutil.copyfileobj(opened.stream, out, 1 << 20)
        yield from read_journal_file(target, ctx)


def _ingest_one(
    con: duckdb.DuckDBPyConnection,
    inp: Input,
    run: str,
    tags: dict[str, str],
    fmt: str | None,
    year: int | None,
    host: str | None,
    progress: Callable[[int], None] | None,
    user: list[Pattern],
) -> SourceResult:
    opened = open_input(inp, progress)
    what = not_a_log(opened.head)
    if what is not None and fmt is None:
        # one file that is no log never costs the others found beside it; one named is an
        # error, but an empty one only says so
        if not inp.found and what != "an empty file":
            raise ForensicsError(f"{inp.name}: {what}, not a log")
        return _skipped(inp, opened, f"{what}, not a log")
    try:
        chosen = fmt or sniff_input(opened.head)
    except NotResults as exc:
        raise ForensicsError(f"{inp.name}: {exc}") from None
    except UnknownFormat as exc:
        if inp.found:
            return _skipped(inp, opened, f"unknown format: {exc}")
        raise ForensicsError(f"{inp.name}: unknown format: {exc}") from None
    ctx = ReadContext(name=inp.name, year=year, host=host, mtime=opened.mtime)
    if inp.is_stdin and host is None:
        ctx.note(
            "stdin without --host: entries take the host the input names, else none "
            "(--host NAME sets it)"
        )
    if chosen in RESULT_FORMATS:
        return _ingest_results(con, inp, opened, chosen, run, tags, ctx)
    # Entries go straight into their table (no staging copy); the transaction undoes them
    # if anything below fails, and dedupe/rejoin work on this source's rows only.
    source_id = scalar(con, "SELECT coalesce(max(source_id), 0) + 1 FROM sources")
    records = RecordSink(con, source_id, run, user)
    columns = _insert_columns(source_id)
    # While batches stream, the parsers hold a few hundred MB beside DuckDB: it gets less.
    con.execute(f"SET memory_limit = '{INGEST_MEMORY_LIMIT}'")
    try:
        for batch in _prefetch(_batches(opened, inp, chosen, ctx)):
            # A relation, not register(): DuckDB keeps registered tables alive until the
            # transaction ends, which made memory grow with the size of the input.
            con.from_arrow(batch).select(columns).insert_into("entries")
            records.submit(batch)
            _report_batch(batch.num_rows)
    except (JournalctlMissing, JournalctlFailed) as exc:
        raise ForensicsError(str(exc)) from None
    finally:
        records.close()
        # Rejoin and dedupe join the whole source; the batches are gone by then.
        con.execute(f"SET memory_limit = '{WHOLE_SOURCE_MEMORY_LIMIT}'")
    sha, seen = _digest(con, opened)
    res = SourceResult(
        inp.name,
        chosen,
        "ingested",
        opened.compression,
        bytes=opened.hasher.nbytes,
        lines=ctx.lines,
    )
    if seen:
        con.execute("DELETE FROM entries WHERE source_id = ?", [source_id])
        for table in RECORD_TABLES.values():
            con.execute(f"DELETE FROM {table} WHERE source_id = ?", [source_id])
        res.status, res.reason = "skipped", seen
        return res
    res.source_id = source_id
    rewritten = _rejoin(con, source_id, chosen in TEXT_FORMATS)
    res.rejoined = len(rewritten)
    res.duplicates = _drop_duplicates(con, source_id)
    res.entries = scalar(con, "SELECT count(*) FROM entries WHERE source_id = ?", [source_id])
    if res.rejoined or res.duplicates:
        records.reconcile(rewritten)
    res.records = records.counts
    # A record that breaks the contract is quarantined with its reason; its entry stays.
    for _entry_no, line, reason, raw in records.rejects:
        ctx.reject(line, reason, raw)
    _store_source(con, inp, opened, res, ctx, sha, run)
    return res


def _skipped(inp: Input, opened: Opened, reason: str) -> SourceResult:
    opened.stream.close()
    return SourceResult(inp.name, "-", "skipped", opened.compression, reason=reason)


def _store_source(
    con: duckdb.DuckDBPyConnection,
    inp: Input,
    opened: Opened,
    res: SourceResult,
    ctx: ReadContext,
    sha: str,
    run: str,
) -> None:
    """The source's quarantined lines and its row in `sources`."""
    assert res.source_id is not None
    if ctx.quarantine:
        q = pa.table(
            {
                "source_id": [res.source_id] * len(ctx.quarantine),
                "line": [x.line for x in ctx.quarantine],
                "reason": [x.reason for x in ctx.quarantine],
                "raw": [x.raw for x in ctx.quarantine],
            }
        )
        con.from_arrow(q).insert_into("quarantine")
    res.quarantined = len(ctx.quarantine)
    res.notes = ctx.notes
    con.execute(
        """INSERT INTO sources (source_id, run, path, sha256, bytes, format, compression, lines,
                                entries, duplicates, rejoined, quarantined, markers, notes)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            res.source_id, run, _display_path(inp), sha, res.bytes, res.format,
            opened.compression, ctx.lines, res.entries, res.duplicates, res.rejoined,
            res.quarantined, ctx.markers, ctx.notes,
        ],
    )  # fmt: skip


def _prefetch(batches: Iterator[pa.Table], depth: int = 2) -> Iterator[pa.Table]:
    """Read the next batches in a thread while DuckDB stores this one: both release the
    GIL, so parsing and storing use both cores."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for b in batches:
                if stop.is_set():
                    return
                q.put(b)
            q.put(done)
        except BaseException as exc:  # handed to the consumer, raised there
            q.put(exc)

    t = threading.Thread(target=produce, name="forensics-reader", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        # Unblock a producer waiting on a full queue. One blocked reading its input (a
        # pipe that stays open, after Ctrl-C) cannot be woken: it is a daemon thread,
        # left to end with the process rather than waited for.
        deadline = time.monotonic() + 2.0
        while t.is_alive() and time.monotonic() < deadline:
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)


def _insert_columns(source_id: int) -> str:
    """The select list that turns a reader batch into an `entries` row, in table order."""
    cols = []
    for name in ENTRY_COLUMNS:
        if name == "source_id":
            cols.append(f"{int(source_id)}::INTEGER AS source_id")
        elif name == "parts":
            cols.append("1::SMALLINT AS parts")
        elif name == "key":
            cols.append(f"hash({_IDENTITY}) AS key")
        else:
            cols.append(name)
    return ", ".join(cols)


def _ingest_results(
    con: duckdb.DuckDBPyConnection,
    inp: Input,
    opened: Opened,
    fmt: str,
    run: str,
    tags: dict[str, str],
    ctx: ReadContext,
) -> SourceResult:
    """A harness results file: rows into `results`, no journal entries. Rows under a run
    header (`forensics repro`) go to that run, its header's fields and `tags` its tags."""
    headers: dict[str, dict[str, str]] = {}
    table = read_results(opened.stream, fmt, ctx, headers)
    sha, seen = _digest(con, opened)
    res = SourceResult(inp.name, fmt, "ingested", opened.compression,
                       bytes=opened.hasher.nbytes, lines=ctx.lines)  # fmt: skip
    if seen:
        res.status, res.reason = "skipped", seen
        return res
    for name, own in headers.items():
        _ensure_run(con, name, {**own, **tags})
    source_id = scalar(con, "SELECT coalesce(max(source_id), 0) + 1 FROM sources")
    res.source_id = source_id
    cols = RESULTS.names
    rows = pl.from_arrow(table).with_columns(
        run=pl.col("run").fill_null(pl.lit(run)), source_id=pl.lit(source_id, pl.Int32)
    )
    con.from_arrow(rows.select(cols).to_arrow()).insert_into("results")
    res.records = {"result": table.num_rows}
    if headers:
        ctx.notes.append(f"runs from the file's headers: {', '.join(headers)}")
    _store_source(con, inp, opened, res, ctx, sha, run)
    return res


def _digest(con: duckdb.DuckDBPyConnection, opened: Opened) -> tuple[str, str]:
    """sha256 of the whole input, and why it is skipped ("" when it is new)."""
    # Drain what the reader did not need, so that the digest covers the whole file.
    while opened.stream.read(1 << 20):
        pass
    sha = opened.hasher.sha.hexdigest()
    dup = first_row(con, "SELECT source_id, run FROM sources WHERE sha256 = ?", [sha])
    if dup is None:
        return sha, ""
    return sha, f"same content (sha256) as source {dup[0]} in run {dup[1]!r}"


def _report_batch(rows: int) -> None:
    """One line per stored batch to FORENSICS_PROGRESS_FD, for wrappers that watch ingest
    (and for the test that kills an ingest mid-way without guessing when)."""
    fd = os.environ.get("FORENSICS_PROGRESS_FD")
    if fd:
        os.write(int(fd), f"batch {rows}\n".encode())


def _display_path(inp: Input) -> str:
    return "-" if inp.path is None else str(inp.path.resolve())


def _rejoin(con: duckdb.DuckDBPyConnection, source_id: int, text: bool) -> list[int]:
    """Join stdout lines that journald split at LineMax back into one entry.

    Structured renderings mark the split (`_LINE_BREAK=line-max`); text renderings do
    not, so there a piece of exactly LineMax bytes followed by the same process is taken
    as one.
    """
    brk = "line_break = 'line-max'"
    if text:
        brk = f"({brk} OR strlen(message) = {LINE_MAX})"
    mine = f"(SELECT * FROM entries WHERE source_id = {int(source_id)})"
    if not scalar(con, f"SELECT count(*) FROM {mine} WHERE {brk}"):
        return []
    stream = "PARTITION BY host, boot_id, pid, ident, unit ORDER BY entry_no"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _joined AS
        WITH marked AS (
            SELECT entry_no, coalesce({brk}, false) AS brk,
                   host, boot_id, pid, ident, unit FROM {mine}
        ), cont AS (
            SELECT *, coalesce(lag(brk) OVER ({stream}), false) AS is_cont FROM marked
        ), grouped AS (
            SELECT *, sum(CASE WHEN is_cont THEN 0 ELSE 1 END)
                      OVER ({stream} ROWS UNBOUNDED PRECEDING) AS grp
            FROM cont
        )
        SELECT entry_no, min(entry_no) OVER (PARTITION BY host, boot_id, pid, ident, unit, grp)
               AS head, count(*) OVER (PARTITION BY host, boot_id, pid, ident, unit, grp) AS n
        FROM grouped
        QUALIFY n > 1
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _merged AS
        SELECT j.head, count(*)::SMALLINT AS parts,
               string_agg(s.message, '' ORDER BY s.entry_no) AS message,
               max(s.line_last) AS line_last, bool_or(s.invalid_utf8) AS invalid_utf8,
               bool_or(s.truncated) AS truncated
        FROM _joined j JOIN {mine} s USING (entry_no) GROUP BY j.head
        """
    )
    con.execute(
        f"""
        UPDATE entries SET message = m.message, parts = m.parts, line_last = m.line_last,
               invalid_utf8 = m.invalid_utf8, truncated = m.truncated, line_break = NULL
        FROM _merged m WHERE entries.source_id = {int(source_id)} AND entries.entry_no = m.head
        """
    )
    con.execute(
        f"""UPDATE entries SET key = hash({_IDENTITY}) WHERE source_id = {int(source_id)}
            AND entry_no IN (SELECT head FROM _merged)"""
    )
    con.execute(
        f"""DELETE FROM entries WHERE source_id = {int(source_id)} AND entry_no IN
            (SELECT entry_no FROM _joined WHERE entry_no <> head)"""
    )
    heads = [r[0] for r in con.execute("SELECT head FROM _merged ORDER BY head").fetchall()]
    con.execute("DROP TABLE _joined; DROP TABLE _merged")
    return heads


# Candidates' message bytes compared in one pass of dedupe. The exact comparison joins
# candidates with the stored entries, messages included: a 3 GB source that repeats a
# stored 742 MB one (2.4 GB of candidates) ran out of memory in one join with DuckDB at
# 512 MB, and peaked at 1,302 MB RSS with 1 GB; in passes of 256 MB it fits in 512 MB
# (978 MB peak RSS, 173 s against 160 s in one pass). Passes of 64 MB: 264 s.
DEDUPE_PASS_BYTES = 256 << 20


def _drop_duplicates(con: duckdb.DuckDBPyConnection, source_id: int) -> int:
    """Remove this source's entries that are already stored (overlapping exports).

    Identity is the tuple of what an entry says, compared exactly (the hash only finds
    candidates). A source may repeat an identical entry (same second, same text); so may
    the stored ones: an entry is dropped only up to the count one stored source already
    holds (multiset overlap). Candidates are compared in passes over key ranges (key
    modulo the number of passes), each about DEDUPE_PASS_BYTES of messages.
    """
    sid = int(source_id)
    cols = _IDENTITY.split(", ")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _cand AS
            SELECT s.entry_no, s.key, strlen(s.message) AS size
            FROM entries s SEMI JOIN (SELECT key FROM entries WHERE source_id <> {sid}) e
              ON s.key = e.key
            WHERE s.source_id = {sid}"""
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
                FROM entries s SEMI JOIN _cand k
                  ON k.entry_no = s.entry_no AND k.key % {passes} = {part}
                WHERE s.source_id = {sid}
            ), held AS (
                SELECT entry_no, max(n) AS held FROM (
                    SELECT c.entry_no, e.source_id, count(*) AS n
                    FROM c JOIN (SELECT * FROM entries WHERE source_id <> {sid}
                                   AND key % {passes} = {part}) e
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
    con.execute(
        f"DELETE FROM entries WHERE source_id = {sid} AND entry_no IN (SELECT entry_no FROM _dups)"
    )
    con.execute("DROP TABLE _dups; DROP TABLE _cand")
    return n
