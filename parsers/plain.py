"""Plain logs, not from journald: SGLang's stdout saved to a file, `docker logs` (with or
without `--timestamps`), docker's json-file log, `kubectl logs --timestamps`, and SGLang's
--export-metrics-to-file records (`sglang-request-metrics-YYYYMMDD_HH.log`: a JSON object
a finished request, its meta_info beside `request_parameters`; `sglang-metrics`).

- Time comes from the line itself: the collector's RFC 3339 prefix (docker, kubectl),
  else SGLang's `[YYYY-MM-DD HH:MM:SS …]` prefix (or Python logging's `YYYY-MM-DD
  HH:MM:SS`). A time-only prefix (`[04:40:55 TP0]`, older SGLang) is dated from the
  dated lines around it (else the file time), rolling over at midnight. A line with no
  time of its own takes the time of the line before. Times without a zone are read as UTC.
- A traceback (an unprefixed `Traceback (most recent call last):`, indented lines, and
  the lines after it up to the next one of a known form: a prefixed line, uvicorn's
  `INFO:`, a line a built-in pattern reads, another traceback) joins the entry it
  belongs to, as one message; unprefixed lines after the exception's (CUDA's advice)
  continue it.
- Blank lines separate nothing: they are counted (`sources.markers`), not stored.
- A metrics record's time is its `response_sent_to_client_ts` (else
  `request_finished_ts`, `request_received_ts`: --enable-metrics), else the hour its file
  is named after (a note says so).
- Host: `--host`, else the file name up to its first dot (`decode-1.log` → decode-1;
  docker's `<id>-json.log` → the container id's first 12 characters; a metrics file,
  named after its hour, → the folder it is in).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import orjson
import pyarrow as pa

from .bounded import lines
from .isotime import iso_us
from .journald.context import ReadContext
from .journald.schema import RowBuilder

if TYPE_CHECKING:  # polars loads with the readers that build a table a column at a time
    import polars as pl

PLAIN_FORMATS = ("sglang", "timestamped", "docker-json", "sglang-metrics", "dynamo-jsonl", "zap",
                 "json-log", "dynamo-request-trace", "flight-recorder", "otlp-json",
                 "otlp-proto", "otlp-logs")  # fmt: skip
# JSON logs read by their declaration (jsonlines.py): time, level and message from its keys
# (a record's message: the line itself)
_DECLARED_READS = ("zap", "json-log", "dynamo-request-trace")
_OTLP = ("otlp-json", "otlp-proto", "otlp-logs")
_RECORDS = ("dynamo-request-trace",)  # declared records, read a chunk at a time
RECORD_CHUNK = 8 << 20  # bytes of record lines a chunk
# readers whose every line is an entry of its own (no continuation lines, no prefix dating)
_WHOLE = ("sglang-metrics", "dynamo-jsonl", "flight-recorder", *_DECLARED_READS)
METRICS_PREFIX = "sglang-request-metrics-"
_METRICS_HOUR = re.compile(r"sglang-request-metrics-(\d{8})_(\d{2})\.log")
_METRICS_TIMES = ("response_sent_to_client_ts", "request_finished_ts", "request_received_ts")
EPOCH_FIRST_S = 946_684_800  # 2000-01-01: an earlier epoch time is a wrong or unset one
BATCH_ROWS = 50_000
BATCH_BYTES = 16 << 20  # or this much text: a batch of records a few kB each stays small
_RFC3339 = re.compile(rb"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(Z|[+-]\d{2}:?\d{2})) ")
_DATED = re.compile(r"^\[?(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)")
_TIME_ONLY = re.compile(r"^\[(\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?)[ \]]")
# The PD stack's other stamps: glog with its year (Mooncake, NIXL: I20250516 09:00:52.19),
# glog and vLLM without one (E0917 16:23:13.20 / (Worker pid=1) ERROR 09-17 16:23:13),
# UCX's epoch seconds ([1784621081.896649] [host:pid:thread])
_GLOG_DATED = re.compile(r"^[IWEF](\d{4})(\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{1,9}) ")
_MONTH_DAY = re.compile(
    r"^(?:[IWEF](\d{2})(\d{2}) |(?:\(\w+ pid=\d+\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(\d{2})-(\d{2}) )(\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?) "
)
_EPOCH_STAMP = re.compile(r"^\[(\d{10})\.(\d{1,9})\] \[")
# A launcher's own stamp around the service's line: `<stamp> <launcher's words> [<SGLang's
# dated prefix>] …`. The outer part starts with a time (not with a bracket, not with
# SGLang's own prefix) and holds no dated bracket of its own.
_WRAPPED = re.compile(
    r"^(?P<outer>[^\[\s](?:(?!\[\d{4}-).){0,40}?\d\d:\d\d:\d\d(?:(?!\[\d{4}-).){0,120}?)"
    r"(?P<inner>\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?: [A-Z]{1,4}\d+)*\] )"
)
_DAY_S = 86_400
_ROLLOVER_S = 6 * 3600  # a time of day that moves back by more than this is the next day
_TRACEBACK = "Traceback (most recent call last):"
# py-spy's lines (queries/stacks.sql reads them): its process, Python, thread lines, frames
_DUMP_LINE = re.compile(r"^(?:Process \d+: |Python v\d|Thread (?:0x[0-9A-Fa-f]+|\d+) |\s+\S)")
_UVICORN = re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL|TRACE):\s")
_NEEDLES: tuple[str, ...] | None = None


def _known_form(text: str) -> bool:
    """A line that starts a record of its own: uvicorn's level prefix, or a line one of
    the built-in patterns reads (its needle)."""
    global _NEEDLES
    if _UVICORN.match(text):
        return True
    if _NEEDLES is None:
        from .patterns import builtin

        _NEEDLES = tuple({p.needle for p in builtin() if len(p.needle) >= 6})
    return any(n in text for n in _NEEDLES)


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _head_lines(head: bytes, limit: int | None = 200) -> list[bytes]:
    lines = [ln for ln in head.split(b"\n")[:limit] if ln.strip()]
    if len(lines) > 1 and not head.endswith(b"\n"):
        lines = lines[:-1]  # the sniff window may cut the last line
    return lines


def sniff_collector(head: bytes) -> str | None:
    """timestamped (docker/kubectl `--timestamps`), else None. Checked before journalctl's
    renderings: a collector's prefix looks like short-iso-precise to them. journalctl
    writes zones as offsets, never "Z"; docker and kubectl write Z. (JSON-lines logs are
    sniffed by their keys before this: jsonlines.py.)"""
    lines = _head_lines(head)
    if not lines:
        return None
    stamped = sum(1 for ln in lines if (m := _RFC3339.match(ln)) and m.group(2) == b"Z")
    return "timestamped" if stamped * 2 > len(lines) else None


def sniff_program(head: bytes) -> str | None:
    """ "sglang" when most lines start with SGLang's (or Python logging's) time prefix:
    checked only once no journalctl rendering fits (they would all be "cat")."""
    texts = [ln.decode("utf-8", "replace") for ln in _head_lines(head, None)]
    # a py-spy dump at the top (the watchdog's, in a rotated log) says nothing of the form:
    # the lines after it do
    texts = [t for t in texts if not _DUMP_LINE.match(t)][:200]
    prefixed = sum(1 for t in texts if _DATED.match(t) or _TIME_ONLY.match(t) or _other_stamp(t))
    # A quarter: tracebacks and unprefixed uvicorn lines may outnumber the prefixed ones.
    return "sglang" if texts and prefixed * 4 >= len(texts) else None


def _other_stamp(text: str) -> bool:
    return bool(_GLOG_DATED.match(text) or _MONTH_DAY.match(text) or _EPOCH_STAMP.match(text))


def host_from_name(name: str) -> str | None:
    base = Path(name).name
    if base in ("", "-"):
        return None
    if base.endswith("-json.log"):  # docker's json-file: <container id>-json.log
        return base.removesuffix("-json.log")[:12] or None
    if base.startswith(METRICS_PREFIX):  # named after its hour: the folder names the server
        return Path(name).parent.name or None
    return base.split(".", 1)[0] or None


def _at(day: dt.date, clock: str) -> int | None:
    """µs of a day and a time of day ("14:03:12,123"), None when it is no time."""
    try:
        return iso_us(f"{day.isoformat()} {clock}")
    except ValueError:
        return None


def _seconds(clock: str) -> int:
    h, m, s = clock[:8].split(":")
    return int(h) * 3600 + int(m) * 60 + int(s)


def _collector_us(text: str | None) -> int | None:
    try:
        return iso_us(text) if text else None
    except ValueError:
        return None


def _epoch_us(v: object, per_second: int = 1) -> int | None:
    """µs of an epoch time in units of 1/per_second s, as a record holds it (None: no such
    time)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    if not EPOCH_FIRST_S <= v / per_second < 253402300800:  # 2000 to 9999
        return None
    return round(v * 1_000_000 / per_second)


def _epoch_expr(v: pl.Expr, per_second: int) -> pl.Expr:
    """`_epoch_us` over a column of the time's text."""
    import polars as pl

    x = v.cast(pl.Float64, strict=False)
    ok = (x / per_second >= EPOCH_FIRST_S) & (x / per_second < 253402300800)
    return pl.when(ok).then((x * (1_000_000 / per_second)).round(0).cast(pl.Int64, strict=False))


def _shaped(text: str, keys: list[str]) -> dict | None:
    """A line as the record keys it holds (None: not a JSON object)."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    return {k: None if obj.get(k) is None else str(obj[k]) for k in keys}


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _take(source: Iterator[bytes], size: int) -> list[bytes]:
    """Lines from `source` up to about `size` bytes (as readlines(size) takes them)."""
    out: list[bytes] = []
    got = 0
    for raw in source:
        out.append(raw)
        got += len(raw)
        if got >= size:
            break
    return out


def _entries(n: int) -> str:
    return "1 entry" if n == 1 else f"{n:,} entries"


@dataclass
class _Entry:
    line_first: int
    line_last: int
    parts: list[bytes]
    ts_us: int | None
    clock: str | None = None  # a time-only prefix's time of day, dated when a date is known
    fields: dict[str, object] = field(default_factory=dict)


class PlainReader:
    def __init__(self, fmt: str, ctx: ReadContext) -> None:
        self.fmt = fmt
        self.ctx = ctx
        # a span's host is its resource's; a dump's or a trace's file names no host
        self.host = ctx.host or (host_from_name(ctx.name) if ctx.host_in_name else None)
        if ctx.host is None and self.host is not None:
            ctx.host_guessed = True
            ctx.note(f"host {self.host!r} from the file name (--host sets it)")
        self.builder = RowBuilder()
        self.entry_no = 0
        self.batch_bytes = 0  # text in the builder
        self.cur: _Entry | None = None
        self.in_traceback = False
        self.past_exception = False  # the traceback's exception line has been read
        self.day: dt.date | None = None  # date of the last dated line
        self.last_secs: int | None = None  # time of day of the last line, for rollover
        self.held: list[_Entry] = []  # entries from the first time-only one to the first date
        self.stamp_year: int | None = None  # for stamps without a year, before any date
        self.launcher_offsets: list[int] = []  # launcher's stamp − the service's, µs
        self.launched = 0  # lines whose launcher's stamp was set aside

    # -- lines --------------------------------------------------------------------
    def _physical(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """(line number, text, collector time, fields) per logical line of the program."""
        n = 0
        if self.fmt == "sglang-metrics":
            yield from self._metrics(stream)
            return
        if self.fmt == "docker-json":
            partial: list[bytes] = []
            first = 0
            for raw in lines(stream, self.ctx):
                n += 1
                try:
                    obj = orjson.loads(raw)
                    log, when = obj["log"], obj.get("time")
                    if not isinstance(log, str) or not isinstance(when, str | None):
                        raise TypeError
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    if raw.strip():
                        self.ctx.reject(n, "docker-json: not a docker json-file line", raw)
                    else:
                        self.ctx.markers += 1
                    continue
                # docker splits lines over 16 KiB into pieces without the final newline
                first = first or n
                partial.append(log.encode())
                if not log.endswith("\n"):
                    continue
                text = b"".join(partial).rstrip(b"\n").removesuffix(b"\r")
                extra = {"stream": obj["stream"]} if isinstance(obj.get("stream"), str) else {}
                yield first, text, _collector_us(when), extra
                partial, first = [], 0
            if partial:
                yield first, b"".join(partial), None, {}
        else:
            yield from self._text(stream)
            return
        self.ctx.lines = n

    def _text(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """A text log's lines (a collector's stamp taken off); a line with a NUL inside
        quarantined, a sparse hole before a line (copytruncate) dropped."""
        n = 0
        for raw in lines(stream, self.ctx):
            n += 1
            text = raw.rstrip(b"\n").removesuffix(b"\r")
            if b"\x00" in text:
                text = text.lstrip(b"\x00")
                if b"\x00" in text:  # a write a crash cut, zeroed: this line only
                    self.ctx.reject(n, "a NUL byte inside the line (a write cut short?)", text)
                    continue
            when = None
            if self.fmt == "timestamped":
                m = _RFC3339.match(text)
                if m is not None:
                    when = _collector_us(m.group(1).decode())
                    text = text[m.end() :]
            yield n, text, when, {}
        self.ctx.lines = n

    def _metrics(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """--export-metrics-to-file records: one JSON object a line, timed by its own
        timestamps, else by the hour of the file's name."""
        m = _METRICS_HOUR.search(Path(self.ctx.name).name)
        day = _date(f"{m.group(1)[:4]}-{m.group(1)[4:6]}-{m.group(1)[6:]}") if m else None
        # the server's local hour, read as UTC like every time without a zone
        hour = _at(day, f"{m.group(2)}:00:00") if m and day else None
        by_name = 0
        records = self._objects(stream, lambda o: "request_parameters" in o,
                                "sglang-metrics: not a request metrics record")  # fmt: skip
        for n, text, obj in records:
            when = next(filter(None, map(_epoch_us, map(obj.get, _METRICS_TIMES))), None)
            if when is None and hour is not None:
                when, by_name = hour, by_name + 1
            yield n, text, when, {}
        if by_name:
            self.ctx.note(f"{by_name:,} metrics records without a timestamp timed by the hour "
                          "in the file's name (start SGLang with --enable-metrics)")  # fmt: skip

    def _objects(
        self, stream: BinaryIO, ok: Callable[[dict], bool], why: str
    ) -> Iterator[tuple[int, bytes, dict]]:
        """(line number, text, object) of each line that is a JSON object `ok` takes; a
        blank line counted, any other quarantined with `why`."""
        n = 0
        for raw in lines(stream, self.ctx):
            n += 1
            text = raw.rstrip(b"\n").removesuffix(b"\r")
            if not text.strip():
                self.ctx.markers += 1
                continue
            try:
                obj = orjson.loads(text)
                if not isinstance(obj, dict) or not ok(obj):
                    raise TypeError
            except (orjson.JSONDecodeError, TypeError):
                self.ctx.reject(n, why, text)
                continue
            yield n, text, obj
        self.ctx.lines = n

    def _dynamo(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """Dynamo's JSONL: time and level from their keys, the message as its readable
        line, every key but time and message kept in fields."""
        from .jsonlines import dynamo_readable

        lines = self._objects(stream, lambda o: isinstance(o.get("message", ""), str),
                              "dynamo-jsonl: not a Dynamo JSONL log line")  # fmt: skip
        for n, _text, obj in lines:
            message, level = dynamo_readable(obj)
            fields = {k: v for k, v in obj.items() if k not in ("time", "message")}
            if level is not None:
                fields["PRIORITY"] = level
            stamp = obj.get("time") if isinstance(obj.get("time"), str) else None
            yield n, message.encode(), _collector_us(stamp), fields

    def _declared(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """A JSON log read by its declaration: the time, the level (as journald's PRIORITY)
        and the message from their keys; the line as the message where it has none (never
        an empty one); its other plain values after the message as key=value (what the
        value namer reads), every key but the message kept in fields."""
        from .jsonlines import BY_NAME, declared_readable

        d = BY_NAME[self.fmt]
        ok = d.holds if d.record else (lambda o: True)
        why = f"{d.name}: not a record of its kind" if d.record else f"{d.name}: not a JSON object"
        for n, text, obj in self._objects(stream, ok, why):
            stamp = next((obj[k] for k in d.time if k in obj), None)
            if d.record:  # the line as it is, for its patterns' JSON paths
                yield n, text, _epoch_us(stamp, d.per_second), {}
                continue
            when = _collector_us(stamp) if isinstance(stamp, str) else _epoch_us(stamp)
            msg, level = declared_readable(d, obj)
            message = text.decode("utf-8", "replace") if msg is None else msg
            fields = {k: v for k, v in obj.items() if v != obj.get(d.message_key(obj))}
            if level is not None:
                fields["PRIORITY"] = level
            yield n, message.encode(), when, fields

    def _flight_recorder(self, stream: BinaryIO) -> Iterator[tuple[int, bytes, int | None, dict]]:
        """A Flight Recorder dump: each entry as the line its pattern reads (the dump
        refused whole, in one quarantined line, where it is not data; an entry that is
        not a dict, or that cannot be read, quarantined by its index)."""
        from . import flight_recorder as fr

        data = stream.read(fr.MAX_DUMP_BYTES + 1)
        self.ctx.lines = 1
        try:
            obj, after = fr.load(data)
        except fr.Refused as exc:
            self.ctx.reject(1, f"flight-recorder: {exc}", data[:200])
            return
        if after:
            self.ctx.note(f"{after:,} bytes after the dump's end, not read")
        rank = fr.rank_of(self.ctx.name)
        untimed = cut = n = 0
        for n, entry in fr.entries(obj):
            self.ctx.lines = n
            try:
                if not isinstance(entry, dict):
                    raise TypeError("an entry that is not a dict")
                text, when, was_cut = fr.entry_line(entry, rank)
            except Exception as exc:  # a value no reader could render: this entry only
                why = str(exc) if isinstance(exc, TypeError) else f"{type(exc).__name__}: {exc}"
                self.ctx.reject(n, f"flight-recorder: {why}", fr.render(entry).encode())
                continue
            untimed, cut = untimed + (when is None), cut + was_cut
            yield n, text.encode(), when, {}
        for k, line in enumerate(fr.group_lines(obj, rank), n + 1):
            self.ctx.lines = k
            yield k, line.encode(), None, {}
        if cut:
            self.ctx.note(f"{_entries(cut)} with a value past {fr.VALUE_CHARS} characters or "
                          f"{fr.MAX_DEPTH} levels, kept cut short")  # fmt: skip
        if untimed:
            self.ctx.note(f"{_entries(untimed)} without a readable time_created_ns (stored "
                          "untimed)")  # fmt: skip

    def _otlp(self, stream: BinaryIO) -> Iterator[pa.Table]:
        """OpenTelemetry spans (parsers/otlp.py): each span an entry under its own host (a
        --host-alias applied), in the order of the file, built a column at a time."""
        import polars as pl

        from .otlp_read import read_otlp

        aliases = self.ctx.aliases
        for spans in read_otlp(stream, self.fmt, self.ctx, self.host):
            for host in set(aliases) & set(spans["host"].drop_nulls().unique().to_list()):
                self.ctx.note(f"trace host {host!r} read as {aliases[host]!r} (--host-alias)")
            if aliases:
                spans = spans.with_columns(host=pl.col("host").replace(aliases))
            yield self._entry_table(spans)

    def _records(self, stream: BinaryIO) -> Iterator[pa.Table]:
        """A declared record format (Dynamo's request trace): the lines themselves as
        entries, timed by their time key, a chunk at a time in polars; a chunk with a line
        that is no JSON object read a line at a time, that line quarantined."""
        import polars as pl

        from .jsonlines import BY_NAME

        d = BY_NAME[self.fmt]
        keys = sorted({k for group in d.needs for k in group} | set(d.time))
        shape = pl.Struct(dict.fromkeys(keys, pl.String))
        n = 0
        source = lines(stream, self.ctx)
        while chunk := _take(source, RECORD_CHUNK):
            texts = [raw.rstrip(b"\n").removesuffix(b"\r").decode("utf-8", "replace")
                     for raw in chunk]  # fmt: skip
            nums = pl.Series(range(n + 1, n + 1 + len(texts)), dtype=pl.Int64)
            n += len(texts)
            rows = pl.DataFrame({"line": nums, "text": texts})
            blank = rows["text"].str.strip_chars() == ""
            self.ctx.markers += int(blank.sum())
            rows = rows.filter(~blank)
            try:
                got = rows["text"].str.json_decode(shape)
            except pl.exceptions.ComputeError:  # a line that is no JSON object: one at a time
                got = pl.Series([_shaped(t, keys) for t in rows["text"]], dtype=shape)
            holds = pl.all_horizontal(
                pl.any_horizontal(pl.col("g").struct.field(k).is_not_null() for k in group)
                for group in d.needs
            )  # fmt: skip
            rows = rows.with_columns(g=got).with_columns(ok=holds.fill_null(False))
            for line, text in rows.filter(~pl.col("ok")).select("line", "text").iter_rows():
                self.ctx.reject(line, f"{d.name}: not a record of its kind", text)
            out = rows.filter("ok").select(
                "line", "text",
                ts_us=_epoch_expr(pl.coalesce(pl.col("g").struct.field(k) for k in d.time),
                                  d.per_second),
            )  # fmt: skip
            self.ctx.tally(f"records whose {'/'.join(d.time)} is no time (stored untimed)",
                           out["ts_us"].null_count())  # fmt: skip
            yield self._entry_table(out)
        self.ctx.lines = n

    def _entry_table(self, rows: pl.DataFrame) -> pa.Table:
        """Entries of (line, text, ts_us) rows under the reader's host, numbered on."""
        import polars as pl

        from .journald.schema import ENTRY_SCHEMA

        n = len(rows)
        cols = rows.select(
            entry_no=pl.int_range(self.entry_no, self.entry_no + n, dtype=pl.Int64),
            ts_us="ts_us", host=pl.lit(self.host, pl.String) if "host" not in rows.columns
            else "host", message="text", line_first="line", line_last="line",
            truncated=pl.lit(False), invalid_utf8=pl.lit(False),
        ).to_arrow()  # fmt: skip
        self.entry_no += n
        return pa.table([cols[c].cast(f.type) if c in cols.column_names else pa.nulls(n, f.type)
                         for c, f in zip(ENTRY_SCHEMA.names, ENTRY_SCHEMA, strict=True)],
                        schema=ENTRY_SCHEMA)  # fmt: skip

    def read(self, stream: BinaryIO) -> Iterator[pa.Table]:
        if self.fmt in _OTLP:
            yield from self._otlp(stream)
            return
        if self.fmt in _RECORDS:
            yield from self._records(stream)
            return
        lines = (self._dynamo(stream) if self.fmt == "dynamo-jsonl"
                 else self._flight_recorder(stream) if self.fmt == "flight-recorder"
                 else self._declared(stream) if self.fmt in _DECLARED_READS
                 else self._physical(stream))  # fmt: skip
        for line, raw, when, extra in lines:
            if self.fmt in _WHOLE:
                self._emit(_Entry(line, line, [raw], when, fields=extra))
            else:
                self._line(line, raw, when, extra)
            if self.builder.n >= BATCH_ROWS or self.batch_bytes >= BATCH_BYTES:
                self.batch_bytes = 0
                yield self.builder.table()
        self._flush()
        self._date_held(None, _DAY_S)  # no dated line at all: the file's day
        self._note_launcher()
        if self.builder.n:
            yield self.builder.table()

    def _line(self, line: int, raw: bytes, when: int | None, extra: dict) -> None:
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            self.ctx.markers += 1
            return
        if when is None and (wrap := _WRAPPED.match(text)) is not None:
            text, raw, extra = self._unwrap(wrap, text, extra)
        dated = _DATED.match(text)
        timed = None if dated else _TIME_ONLY.match(text)
        other = None if dated or timed else self._other_us(text)
        if (dated is None and timed is None and other is None and self.cur is not None
                and self._continues(text)):  # fmt: skip
            self.cur.parts.append(raw)
            self.cur.line_last = line
            return
        # A traceback is its own entry, or part of the entry whose line opened it
        # ("… hit an exception: Traceback (most recent call last):").
        self.in_traceback = _TRACEBACK in text
        self.past_exception = False
        self._flush()
        entry = _Entry(line, line, [raw], when, fields=extra)
        day = _date(dated.group(1)) if dated is not None else None
        if day is not None:
            assert dated is not None
            clock = dated.group(2)
            self._date_held(day, _seconds(clock))
            self.day, self.last_secs = day, _seconds(clock)
            if entry.ts_us is None:
                entry.ts_us = _at(day, clock)
        elif timed is not None and entry.ts_us is None:
            entry.clock = timed.group(1)
        elif other is not None and entry.ts_us is None:
            entry.ts_us = other
        self.cur = entry

    def _unwrap(self, wrap: re.Match[str], text: str, extra: dict) -> tuple[str, bytes, dict]:
        """The service's line out of a launcher's: SGLang's own stamp times it, the
        launcher's words are kept in the entry's fields (LAUNCHER_PREFIX) and its stamp's
        offset from the service's is noted once for the file."""
        outer = wrap.group("outer")
        inner = _DATED.match(wrap.group("inner"))
        assert inner is not None
        day = _date(inner.group(1))
        service = _at(day, inner.group(2)) if day is not None else None
        launcher = self._stamp_us(outer)
        if service is not None and launcher is not None:
            self.launcher_offsets.append(launcher - service)
        self.launched += 1
        text = text[wrap.start("inner") :]
        return text, text.encode(), {**extra, "LAUNCHER_PREFIX": outer.rstrip()}

    def _stamp_us(self, outer: str) -> int | None:
        """µs of a launcher's stamp: ISO (RFC 3339 with its zone, else read as UTC), glog,
        vLLM or UCX."""
        if m := _RFC3339.match(outer.encode() + b" "):
            return _collector_us(m.group(1).decode())
        if (m := _DATED.match(outer)) and (day := _date(m.group(1))) is not None:
            return _at(day, m.group(2))
        return self._other_us(outer)

    def _note_launcher(self) -> None:
        if not self.launched:
            return
        offs = sorted(self.launcher_offsets)
        said = (f"{self.launched:,} lines carry a launcher's stamp around SGLang's own: "
                "SGLang's time taken")  # fmt: skip
        if offs:
            med = offs[len(offs) // 2] / 1e6
            said += (f" (the launcher's is {med:+.3f} s from it, median; "
                     f"{offs[0] / 1e6:+.3f} to {offs[-1] / 1e6:+.3f} s)")  # fmt: skip
        self.ctx.note(said + "; its words are in fields.LAUNCHER_PREFIX")

    def _other_us(self, text: str) -> int | None:
        """µs of a glog, vLLM or UCX stamp; a month and day without a year take the year
        of the dated line before (past New Year when the month went back), else the
        file time's (a note says so)."""
        if m := _EPOCH_STAMP.match(text):
            return int(m.group(1)) * 1_000_000 + int(m.group(2).ljust(6, "0")[:6])
        if m := _GLOG_DATED.match(text):
            day = _date(f"{m.group(1)}-{m.group(2)}-{m.group(3)}")
            return _at(day, m.group(4)) if day else None
        m = _MONTH_DAY.match(text)
        if m is None:
            return None
        month, mday = (int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4)))
        if self.day is not None:
            year = self.day.year + (1 if month + 6 < self.day.month else 0)
        else:
            year = self._stamp_year()
        try:
            return _at(dt.date(year, month, mday), m.group(5))
        except ValueError:
            return None

    def _stamp_year(self) -> int:
        if self.stamp_year is None:
            when = dt.datetime.fromtimestamp(self.ctx.mtime, dt.UTC) if self.ctx.mtime else None
            self.stamp_year = (when or dt.datetime.now(dt.UTC)).year
            self.ctx.note(
                f"glog/vLLM stamps have no year: {self.stamp_year} taken from the "
                + ("file time" if when else "current date")
                + " (no dated line before them)"
            )
        return self.stamp_year

    def _continues(self, text: str) -> bool:
        """An unprefixed line joins the entry before: indented, or inside a traceback —
        which ends at the first line of a known form (uvicorn's `INFO:`, a line a
        pattern reads, another traceback); other lines after the exception's (CUDA's
        advice) continue its message."""
        if text.startswith(_TRACEBACK):
            return False
        if text[:1].isspace():
            return True
        if not self.in_traceback:
            return False
        if not self.past_exception:  # the exception's own line ("RuntimeError: CUDA error…")
            self.past_exception = True
            return True
        return not _known_form(text)

    # -- entries ------------------------------------------------------------------
    def _flush(self) -> None:
        e, self.cur = self.cur, None
        if e is None:
            return
        if self.day is None and (e.clock is not None or self.held):
            self.held.append(e)  # until a date is known; later entries wait too, in order
            return
        if e.clock is not None:
            e.ts_us = self._time_of_day(e.clock)
        self._emit(e)

    def _time_of_day(self, clock: str) -> int | None:
        """Date a time-only prefix from the day of the line before, past midnight if
        the time of day moved back by more than six hours."""
        assert self.day is not None
        secs = _seconds(clock)
        if self.last_secs is not None and secs + _ROLLOVER_S < self.last_secs:
            self.day += dt.timedelta(days=1)
        self.last_secs = secs
        return _at(self.day, clock)

    def _date_held(self, day: dt.date | None, secs: int) -> None:
        """Date the entries held before the first date: backwards from `day` at `secs`
        (a time of day that moves forward by more than six hours going back in time is
        the day before), or from the file time when no line has a date."""
        if not self.held:
            return
        if day is None:
            when = dt.datetime.fromtimestamp(self.ctx.mtime, dt.UTC) if self.ctx.mtime else None
            day = (when or dt.datetime.now(dt.UTC)).date()
            self.ctx.note(
                f"time-only prefixes dated {day} from the "
                + ("file time" if when else "current date")
                + " (no dated line)"
            )
        for e in reversed(self.held):
            if e.clock is None:
                continue
            s = _seconds(e.clock)
            if s - _ROLLOVER_S > secs:
                day -= dt.timedelta(days=1)
            secs = s
            e.ts_us = _at(day, e.clock)
        held, self.held = self.held, []
        for e in held:
            self._emit(e)

    def _emit(self, e: _Entry) -> None:
        msg = b"\n".join(e.parts)
        self.batch_bytes += len(msg)
        values: dict[str, object] = {"message": msg, "ts_us": e.ts_us}
        if "PRIORITY" in e.fields:  # a level the reader knows as journald's (Dynamo's)
            values["priority"] = e.fields.pop("PRIORITY")
        if self.host is not None:
            values["host"] = self.host
        self.builder.add(self.entry_no, values, e.fields or None, e.line_first, e.line_last)
        self.entry_no += 1


def read_plain(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    yield from PlainReader(fmt, ctx).read(stream)
