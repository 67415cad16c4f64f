"""One input read into a staged source: its rows of every table as Parquet files in a
folder of its own, not yet registered (register.py does that, under the catalog's lock).

This is the unit of parallel work: it needs no catalog, so it runs in this process, in a
worker process, or in a Ray task on the host that holds the input; what comes back is a
`Staged` (small, picklable) and the folder.
"""

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
import orjson
import polars as pl
import pyarrow as pa

from ..errors import ForensicsError
from ..parsers import pyvalues
from ..parsers.formats import read_stream, sniff_input, weight
from ..parsers.journald import (
    JournalctlFailed,
    JournalctlMissing,
    ReadContext,
    UnknownFormat,
    read_journal_file,
)
from ..parsers.journald.text import TEXT_FORMATS
from ..parsers.patterns import Pattern
from ..parsers.results import JOURNAL_KEYS, RESULT_FORMATS, NotResults, read_results
from ..parsers.tables import ENTRIES, QUARANTINE, RESULTS, read_parquet
from .database import INGEST_MEMORY_LIMIT, SCHEMA_VERSION, WHOLE_SOURCE_MEMORY_LIMIT
from .inputs import Input, Opened, not_a_log, open_input
from .records import COUNTED, MAX_TEXTS, RecordSink
from .records import TABLES as RECORD_TABLES
from .renderings import RICH
from .shards import ROW_GROUP_ROWS, ShardWriter, rows_in
from .times import InheritedTimes

LINE_MAX = 48 * 1024  # journald's default LineMax: a longer stdout line is split there
# An entry's dedupe key hashes what every rendering of it shows alike (its second, host
# and message): it finds the sources worth comparing, and the rules of renderings.py
# decide which entries are one.
KEY = "ts_us // 1000000, host, message"


@dataclass
class SourceResult:
    name: str
    format: str
    status: str  # ingested | skipped | failed
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
class Staged:
    """A source read and written, waiting to be registered."""

    result: SourceResult
    path: str  # what `sources.path` says: the input's absolute path, or "-"
    sha256: str = ""
    markers: int = 0
    folder: str | None = None  # the staged files' folder (None: nothing to register)
    files: dict[str, list[str]] = field(default_factory=dict)  # table -> names in folder
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # results' run headers
    # found in a folder walk, its host a guess (its file's name, or none: `-o cat`): it is
    # aligned against every host of the sources that know theirs (store/across.py)
    guessed: bool = False
    patterns: str = ""  # the user's patterns it was read with (TOML), kept with the source


@dataclass(frozen=True)
class Options:
    """What every input of one ingest is read with."""

    run: str = "default"
    named: bool = False  # --run was given: it wins over a results file's run headers
    fmt: str | None = None
    year: int | None = None
    host: str | None = None
    host_alias: tuple[tuple[str, str], ...] = ()  # --host-alias TRACE=JOURNAL
    user: tuple[Pattern, ...] = ()
    user_text: str = ""  # the user's pattern files as given: stored with each source


def stage(
    inp: Input,
    folder: Path,
    opts: Options,
    progress: Callable[[int], None] | None = None,
) -> Staged:
    """Read one input into `folder` (created): its shard files and what it held."""
    folder.mkdir(parents=True, exist_ok=True)
    # Readers make millions of short-lived, acyclic objects (json dicts, field tuples):
    # refcounting frees them; the cycle collector only spends time (22 % of json reading).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _stage(inp, folder, opts, progress)
    except ForensicsError as exc:
        if not inp.found:  # named: the ingest fails, the catalog unchanged
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return _unread(inp, folder, str(exc).removeprefix(f"{inp.name}: "))
    except OSError:  # the disk's or the catalog's, not the input's: the ingest stops
        shutil.rmtree(folder, ignore_errors=True)
        raise
    except Exception as exc:  # a reader's, a decoder's, Python's own: this input's
        first = str(exc).split("\n", 1)[0][:200]
        return _unread(inp, folder, f"no reader could read it ({type(exc).__name__}: {first})")
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        if gc_was_enabled:
            gc.enable()


def _unread(inp: Input, folder: Path, why: str) -> Staged:
    """An input that could not be read: named, the ingest fails in one line with the
    catalog unchanged; found in a folder, it is skipped with the reason, and one
    unreadable file never costs the others."""
    shutil.rmtree(folder, ignore_errors=True)
    if not inp.found:
        raise ForensicsError(f"{inp.name}: {why}") from None
    return Staged(SourceResult(inp.name, "-", "skipped", reason=why), display_path(inp))


def _stage(
    inp: Input, folder: Path, opts: Options, progress: Callable[[int], None] | None
) -> Staged:
    if inp.skip:  # found in a folder walk, and surely no log
        return _not_read(inp, inp.skip)
    opened = open_input(inp, progress)
    what = not_a_log(opened.head) if not opened.nul_head else None
    if opened.nul_head and not opened.head:
        what = f"{opened.nul_head:,} NUL bytes and nothing else"
    if what is not None and opts.fmt is None:
        # one file that is no log never costs the others found beside it; one named is an
        # error, but an empty one only says so
        if not inp.found and what != "an empty file":
            raise ForensicsError(f"{inp.name}: {what}, not a log")
        return _skipped(inp, opened, f"{what}, not a log")
    try:
        chosen = opts.fmt or sniff_input(opened.head)
    except NotResults as exc:
        raise ForensicsError(f"{inp.name}: {exc}") from None
    except UnknownFormat as exc:
        if inp.found:
            return _skipped(inp, opened, f"unknown format: {exc}")
        raise ForensicsError(f"{inp.name}: unknown format: {exc}") from None
    found_json = inp.found and opts.fmt is None and chosen in ("json", "json-seq", "json-log")
    if found_json and (why := no_journal_json(opened.head)) is not None:
        return _skipped(inp, opened, why)
    ctx = ReadContext(
        name=inp.name,
        year=opts.year,
        host=opts.host,
        mtime=opened.mtime,
        aliases=dict(opts.host_alias),
    )
    if opened.nul_head:  # said with its offset, as a line no reader could take
        ctx.reject(1, f"{opened.nul_head:,} NUL bytes at offset 0, before line 1 (a file "
                   "truncated while written: logrotate's copytruncate?)", "")  # fmt: skip
    if inp.is_stdin and opts.host is None:
        ctx.note(
            "stdin without --host: entries take the host the input names, else none "
            "(--host NAME sets it)"
        )
    writer = ShardWriter(folder, SCHEMA_VERSION)
    try:
        if chosen in RESULT_FORMATS:
            staged = _results(inp, opened, chosen, opts, ctx, writer)
        else:
            staged = _entries(inp, opened, chosen, opts, ctx, writer)
    except BaseException:
        writer.abort()
        raise
    if staged.result.status == "skipped":  # read, and found to be no log
        writer.abort()
        return staged
    staged.files = writer.close()
    staged.folder = str(folder)
    return staged


def _log_keys() -> frozenset[str]:
    from ..parsers.jsonlines import BY_NAME

    return frozenset(BY_NAME["json-log"].time + BY_NAME["json-log"].message)


_LOG_KEYS = _log_keys()


def no_journal_json(head: bytes) -> str | None:
    """Why JSON found in a folder is no journal (an answer key, a config, a pretty-printed
    document), or None: journalctl's json starts with an entry holding journal fields."""
    first = head.lstrip(b"\x1e\n\r\t ").split(b"\n", 1)[0].strip().lstrip(b"\x1e")
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        if first in (b"{", b"["):
            return ("JSON that is no journal, results, metrics file or JSON log (a document "
                    "over lines)")  # fmt: skip
        return None  # a damaged journal line: the reader quarantines it
    if isinstance(obj, dict) and JOURNAL_KEYS & obj.keys():
        return None
    if isinstance(obj, dict) and _LOG_KEYS & obj.keys():  # a JSON log: a time or a message
        return None
    return ("JSON that is no journal, results, metrics file or JSON log (no journal field, "
            "time or message in its first line)")  # fmt: skip


def _no_log_line(inp: Input, opts: Options, fmt: str, times: InheritedTimes) -> bool:
    """A file found in a folder that no reader recognised (sniffed as `cat`) and with no
    time in any line: a note, a script, a listing — not a log (unless --host names the
    host of what the folder holds: then it is read as a log of that host)."""
    return (inp.found and opts.fmt is None and opts.host is None and fmt == "cat"
            and times.last is None)  # fmt: skip


def _not_read(inp: Input, what: str) -> Staged:
    return Staged(
        SourceResult(inp.name, "-", "skipped", reason=_read_anyway(inp, what)), display_path(inp)
    )


def _read_anyway(inp: Input, what: str) -> str:
    """Why a file found in a folder was skipped, and the command that reads it anyway."""
    if inp.path is not None and inp.path.is_dir():
        return f"{what}, not read"
    return f"{what}, not a log (`forensics ingest --format cat {inp.name}` reads it anyway)"


def _skipped(inp: Input, opened: Opened, reason: str) -> Staged:
    opened.stream.close()
    res = SourceResult(inp.name, "-", "skipped", opened.compression, reason=reason)
    return Staged(res, display_path(inp))


def _local_duckdb(memory: str) -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB for this source's own SQL (projection, rejoin); it
    spills to a temporary folder beyond `memory`."""
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute(f"SET memory_limit = '{memory}'")
    con.execute("SET preserve_insertion_order = true")
    return con


def _entries(
    inp: Input, opened: Opened, fmt: str, opts: Options, ctx: ReadContext, writer: ShardWriter
) -> Staged:
    con = _local_duckdb(INGEST_MEMORY_LIMIT)
    records = RecordSink(
        lambda table, df: writer.write(table, df.to_arrow()),
        opts.run,
        list(opts.user),
        weight(fmt),
    )
    text = fmt in TEXT_FORMATS
    times = InheritedTimes(own=fmt in RICH)
    try:
        breaks = _read_entries(con, (opened, inp, fmt, ctx), writer, records, times)
        sha = digest(opened)
        if _no_log_line(inp, opts, fmt, times):
            res = SourceResult(inp.name, "-", "skipped", opened.compression,
                               reason=_read_anyway(inp, "no line in a known log form"))  # fmt: skip
            return Staged(res, display_path(inp))
        _said_cut(opened, ctx)
        res = SourceResult(inp.name, fmt, "ingested", opened.compression,
                           bytes=opened.hasher.nbytes, lines=ctx.lines)  # fmt: skip
        writer.close()
        res.entries = writer.written.get("entries", 0)
        if breaks:
            con.execute(f"SET memory_limit = '{WHOLE_SOURCE_MEMORY_LIMIT}'")
            heads, gone = _rejoin(con, writer, text)
            res.rejoined = len(heads)
            res.entries -= gone
            if heads:
                _reconcile(con, writer, records, heads)
    finally:
        con.close()
    res.records = {k: records.counts[k] for k in COUNTED}
    ctx.say_tallies()
    ctx.notes.extend(times.notes())
    # A record that breaks the contract is quarantined with its reason; its entry stays.
    quarantine = [(x.line, x.reason, x.raw, None) for x in ctx.quarantine]
    quarantine += [(line, reason, raw, no) for no, line, reason, raw in records.rejects]
    write_quarantine(writer, quarantine)
    res.quarantined = len(quarantine)
    res.notes = ctx.notes
    if records.texts_dropped:
        res.notes.append(f"{records.texts_dropped} templates past the first {MAX_TEXTS} stored "
                         "without their text (their ids are kept)")  # fmt: skip
    guessed = inp.found and opts.host is None and opts.fmt is None and (
        ctx.host_guessed or fmt == "cat")  # fmt: skip
    return Staged(res, display_path(inp), sha, ctx.markers, guessed=guessed,
                  patterns=opts.user_text)  # fmt: skip


def _read_entries(
    con: duckdb.DuckDBPyConnection,
    source: tuple[Opened, Input, str, ReadContext],
    writer: ShardWriter,
    records: RecordSink,
    times: InheritedTimes,
) -> int:
    """The reader's batches, their untimed entries given the time before them, into the
    entries' files and the record parsers: how many LineMax pieces they hold."""
    opened, inp, fmt, ctx = source
    breaks = 0
    try:
        for read in _prefetch(_batches(opened, inp, fmt, ctx)):
            batch = times.apply(read)
            writer.write("entries", keyed(con, batch))  # straight to Parquet
            breaks += _breaks(batch, fmt in TEXT_FORMATS)
            records.submit(batch)
            report_batch(batch.num_rows)
    except (JournalctlMissing, JournalctlFailed) as exc:
        raise ForensicsError(str(exc)) from None
    finally:
        records.close()
    return breaks


def arrow_table(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """A relation's rows as one Arrow table (DuckDB 1.4 and 2 hand out a reader)."""
    out = rel.arrow()
    return out.read_all() if hasattr(out, "read_all") else out


def arrow_batches(rel: duckdb.DuckDBPyRelation, rows: int = ROW_GROUP_ROWS) -> pa.RecordBatchReader:
    """A relation's rows streamed in batches (DuckDB 2 renamed the call)."""
    f = getattr(rel, "to_arrow_reader", None) or rel.fetch_arrow_reader
    return f(rows)


def write_query(
    con: duckdb.DuckDBPyConnection, writer: ShardWriter, table: str, sql: str
) -> list[Path]:
    """A query's rows, streamed into a new file of `table`: the file (none if no rows)."""
    before = set(writer.files.get(table, []))
    for batch in arrow_batches(con.sql(sql)):
        writer.write(table, pa.Table.from_batches([batch]))
    writer.close()
    return [writer.where / f for f in writer.files.get(table, []) if f not in before]


def _said_cut(opened: Opened, ctx: ReadContext) -> None:
    """An archive cut short: its whole lines were read; the note says so, and the line it
    ends inside is quarantined."""
    if (cut := opened.cut()) is None:
        return
    why, tail = cut
    ctx.note(f"{why}: the whole lines before the cut are kept")
    if tail.strip():
        ctx.lines += 1  # counted among the source's lines: stored + quarantined = lines
        ctx.reject(ctx.lines, f"{why}: the line it ends inside", tail)


def write_quarantine(writer: ShardWriter, rows: list[tuple]) -> None:
    """Quarantine rows (line, reason, raw, entry_no) into the source's file."""
    if rows:
        line, reason, raw, no = (list(c) for c in zip(*rows, strict=True))
        cols = {"line": line, "reason": reason, "raw": raw, "entry_no": no}
        # not pa.array: it imports pandas
        writer.write("quarantine", pyvalues.table(cols, QUARANTINE.arrow(skip=("source_id",))))


def _breaks(batch: pa.Table, text: bool) -> int:
    """Pieces of a line journald split at LineMax in this batch (see _rejoin)."""
    df = pl.from_arrow(batch.select(["line_break", "message"]))
    mark = pl.col("line_break") == "line-max"
    if text:
        mark = mark | (pl.col("message").str.len_bytes() == LINE_MAX)
    return int(df.select(mark.fill_null(False).sum()).item())  # type: ignore[union-attr]


def _results(
    inp: Input, opened: Opened, fmt: str, opts: Options, ctx: ReadContext, writer: ShardWriter
) -> Staged:
    """A harness results file: its rows, no journal entries. Rows under a run header
    (`forensics repro`) go to that run."""
    headers: dict[str, dict[str, str]] = {}
    table = read_results(opened.stream, fmt, ctx, headers)
    sha = digest(opened)
    res = SourceResult(inp.name, fmt, "ingested", opened.compression,
                       bytes=opened.hasher.nbytes, lines=ctx.lines)  # fmt: skip
    names = as_named(list(headers), opts.run) if opts.named else {h: h for h in headers}
    run = pl.col("run").replace_strict(names, default=pl.col("run"), return_dtype=pl.String)
    rows = pl.from_arrow(table).with_columns(run=run.fill_null(pl.lit(opts.run)))
    writer.write("results", rows.select([n for n in RESULTS.names if n != "source_id"]).to_arrow())
    res.records = {"result": table.num_rows}
    if headers:
        ctx.notes.append(_runs_note(names))
    headers = {names[h]: tags for h, tags in headers.items()}
    _said_cut(opened, ctx)
    write_quarantine(writer, [(x.line, x.reason, x.raw, None) for x in ctx.quarantine])
    res.quarantined = len(ctx.quarantine)
    res.notes = ctx.notes
    return Staged(res, display_path(inp), sha, ctx.markers, headers=headers)


def as_named(headers: list[str], run: str) -> dict[str, str]:
    """The file's run headers under the --run given: one run takes its name; several (a
    sweep's `-s10`, `-s20`, a golden run's `-solo`) keep what follows their common stem."""
    if len(headers) <= 1:
        return {h: run for h in headers}
    stem = os.path.commonprefix(headers)  # noqa: RUF071  (names, not paths: by character)
    while stem and not all(len(h) == len(stem) or h[len(stem)] == "-" for h in headers):
        stem = stem[:-1]  # back to a whole part: `inc` of `inc-s10`, `inc-s20`, `inc-solo`
    return {h: run + (h[len(stem) :] if stem else f"-{h}") for h in headers}


def _runs_note(names: dict[str, str]) -> str:
    if all(h == r for h, r in names.items()):
        return f"runs from the file's headers: {', '.join(names)}"
    said = ", ".join(f"{h} as {r}" for h, r in names.items())
    return f"--run wins over the file's headers: {said}"


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


def _prefetch(batches: Iterator[pa.Table], depth: int = 2) -> Iterator[pa.Table]:
    """Read the next batches in a thread while this one is written: both release the
    GIL, so parsing and writing use both cores."""
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


def keyed(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> pa.Table:
    """A reader batch as `entries` rows in table order (`source_id` is the shard's
    folder). DuckDB computes the dedupe key only (its hash, as stored sources have it):
    the other columns are the batch's own buffers, where a select of every column copied
    each message once more (13 → 10 ms a 16 MB batch, the writer's cast included)."""
    # (`parts` comes from DuckDB too: pyarrow's scalars and arrays from numpy import
    # pandas where it is installed, 0.15 s of an ingest)
    made = arrow_table(con.from_arrow(batch).select(f"1::SMALLINT AS parts, hash({KEY}) AS key"))
    own = dict(zip(batch.column_names, batch.columns, strict=True))
    own |= {"parts": made["parts"], "key": made["key"]}  # a read entry is one part
    return pa.table({n: own[n] for n in ENTRIES.names if n != "source_id"})


def digest(opened: Opened) -> str:
    """sha256 of the whole input (what the reader did not need is read for it)."""
    while opened.stream.read(1 << 20):
        pass
    return opened.hasher.hexdigest()


def report_batch(rows: int) -> None:
    """One line per written batch to FORENSICS_PROGRESS_FD, for wrappers that watch ingest
    (and for the test that kills an ingest mid-way without guessing when)."""
    fd = os.environ.get("FORENSICS_PROGRESS_FD")
    if fd:
        os.write(int(fd), f"batch {rows}\n".encode())


def display_path(inp: Input) -> str:
    return "-" if inp.path is None else str(inp.path.resolve())


def sql_path(p: Path) -> str:
    return "'" + str(p).replace("'", "''") + "'"


def _rejoin(con: duckdb.DuckDBPyConnection, writer: ShardWriter, text: bool) -> tuple[list, int]:
    """Join stdout lines that journald split at LineMax back into one entry: (the heads
    rewritten, entries gone).

    Structured renderings mark the split (`_LINE_BREAK=line-max`); text renderings do
    not, so there a piece of exactly LineMax bytes followed by the same process is taken
    as one.
    """
    brk = "line_break = 'line-max'"
    if text:
        brk = f"({brk} OR strlen(message) = {LINE_MAX})"
    src = writer.paths("entries")
    con.execute(f"CREATE OR REPLACE TEMP VIEW mine AS SELECT * FROM {read_parquet(src)}")
    stream = "PARTITION BY host, boot_id, pid, ident, unit ORDER BY entry_no"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _joined AS
        WITH marked AS (
            SELECT entry_no, coalesce({brk}, false) AS brk,
                   host, boot_id, pid, ident, unit FROM mine
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
    if not con.execute("SELECT count(*) FROM _joined").fetchall()[0][0]:
        con.execute("DROP TABLE _joined; DROP VIEW mine")
        return [], 0
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE _merged AS
        SELECT j.head, count(*)::SMALLINT AS parts,
               string_agg(s.message, '' ORDER BY s.entry_no) AS message,
               max(s.line_last) AS line_last, bool_or(s.invalid_utf8) AS invalid_utf8,
               bool_or(s.truncated) AS truncated
        FROM _joined j JOIN mine s USING (entry_no) GROUP BY j.head
        """
    )
    gone = con.execute("SELECT count(*) FROM _joined WHERE entry_no <> head").fetchall()[0][0]
    identity = "s.ts_us // 1000000, s.host, coalesce(m.message, s.message)"
    new = write_query(con, writer, "entries", f"""
        SELECT s.* REPLACE (
            coalesce(m.message, s.message) AS message,
            coalesce(m.parts, s.parts) AS parts,
            coalesce(m.line_last, s.line_last) AS line_last,
            coalesce(m.invalid_utf8, s.invalid_utf8) AS invalid_utf8,
            coalesce(m.truncated, s.truncated) AS truncated,
            CASE WHEN m.head IS NULL THEN s.line_break END AS line_break,
            CASE WHEN m.head IS NULL THEN s.key ELSE hash({identity}) END AS key)
        FROM mine s LEFT JOIN _merged m ON s.entry_no = m.head
        WHERE s.entry_no NOT IN (SELECT entry_no FROM _joined WHERE entry_no <> head)
        ORDER BY s.entry_no""")  # fmt: skip
    heads = [r[0] for r in con.execute("SELECT head FROM _merged ORDER BY head").fetchall()]
    con.execute("DROP TABLE _joined; DROP TABLE _merged; DROP VIEW mine")
    writer.replace("entries", new)
    return heads, gone


def _reconcile(
    con: duckdb.DuckDBPyConnection, writer: ShardWriter, records: RecordSink, heads: list[int]
) -> None:
    """After a rejoin: records of the entries no longer stored, and of the heads whose
    message changed, go; the heads are read again."""
    entries = read_parquet(writer.paths("entries"))
    con.execute(f"CREATE OR REPLACE TEMP TABLE kept AS "
                f"SELECT entry_no FROM {entries}")  # fmt: skip
    con.execute("CREATE OR REPLACE TEMP TABLE heads (entry_no BIGINT)")
    con.executemany("INSERT INTO heads VALUES (?)", [[h] for h in heads])
    for kind, table in RECORD_TABLES.items():
        old = writer.paths(table)
        if not old:
            continue
        new = write_query(con, writer, table, f"""
            SELECT * FROM {read_parquet(old)}
            WHERE entry_no IN (SELECT entry_no FROM kept)
              AND entry_no NOT IN (SELECT entry_no FROM heads)""")  # fmt: skip
        writer.replace(table, new)
        records.counts[kind] = sum(rows_in(p) for p in new)
    kept = {r[0] for r in con.execute("SELECT entry_no FROM kept").fetchall()}
    gone = set(heads)
    records.rejects = [r for r in records.rejects if r[0] in kept and r[0] not in gone]
    again = con.sql(
        f"SELECT entry_no, line_first, host, ts_us, priority, message, fields FROM {entries}"
        " WHERE entry_no IN (SELECT entry_no FROM heads) ORDER BY entry_no"
    ).pl()
    con.execute("DROP TABLE kept; DROP TABLE heads")
    records.reread(again)
    writer.close()
