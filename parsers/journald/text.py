"""journalctl's text renderings (`short*`, `with-unit`, `cat`), parsed a chunk at a time.

Each chunk of lines becomes one Arrow string array without a Python object per line;
polars' regex engine splits the header off every line at once. Only chunks with
continuation lines (multi-line messages) or invalid UTF-8 take a slower path.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

from .context import ReadContext
from .schema import ENTRY_SCHEMA

CHUNK_BYTES = 16 << 20
MAX_CARRY_BYTES = 256 << 20  # one multi-line entry may grow a chunk up to this
_TAIL = r" (?P<host>\S+) (?P<ident>.*?)(?:\[(?P<pid>\d+)\])?:(?: (?P<msg>.*))?\r?\n?$"
_UNIT_SUFFIXES = (
    ".service", ".scope", ".slice", ".socket", ".mount", ".timer", ".target", ".swap", ".path",
    ".device", ".automount",
)  # fmt: skip
_MONTH_NAMES = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec"
MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES.split(), 1)}
_SGLANG_TS = r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\]"
_MARKER = re.compile(r"^-- (?:Boot (?P<boot>[0-9a-f]{32})|[^\n]*?) --\r?\n?$")


@dataclass(frozen=True)
class TextFormat:
    name: str
    head: str  # regex of the timestamp, group `ts`
    clock: str  # realtime | realtime-noyear | unix | monotonic | none
    strptime: str = ""


TEXT_FORMATS = {
    f.name: f
    for f in [
        TextFormat(
            "short-iso-precise",
            r"(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{1,9}(?:[+-]\d{2}:?\d{2}|Z))",
            "realtime",
            "%Y-%m-%dT%H:%M:%S%.f%z",
        ),
        TextFormat(
            "short-iso",
            r"(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[+-]\d{2}:?\d{2}|Z))",
            "realtime",
            "%Y-%m-%dT%H:%M:%S%z",
        ),
        TextFormat(
            "short-full",
            r"[A-Z][a-z]{2} (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?) (?P<tz>\S+)",
            "realtime-zone",
            "%Y-%m-%d %H:%M:%S%.f",
        ),
        TextFormat(
            "with-unit",
            r"[A-Z][a-z]{2} (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,9})?) (?P<tz>\S+)",
            "realtime-zone",
            "%Y-%m-%d %H:%M:%S%.f",
        ),
        TextFormat(
            "short-precise",
            r"(?P<ts>[A-Z][a-z]{2} [ 0-3]\d \d{2}:\d{2}:\d{2}\.\d{1,9})",
            "realtime-noyear",
            "%Y %b %d %H:%M:%S%.f",
        ),
        TextFormat(
            "short",
            r"(?P<ts>[A-Z][a-z]{2} [ 0-3]\d \d{2}:\d{2}:\d{2})",
            "realtime-noyear",
            "%Y %b %d %H:%M:%S",
        ),
        TextFormat("short-unix", r"(?P<ts>\d+\.\d{1,9})", "unix"),
        TextFormat("short-monotonic", r"\[\s*(?P<ts>\d+\.\d{1,9})\]", "monotonic"),
        TextFormat("cat", "", "none"),
    ]
}


def header_regex(fmt: TextFormat) -> str:
    return "^" + fmt.head + _TAIL


def _split_lines(block: bytes) -> tuple[pa.Array, np.ndarray]:
    """Lines of a block that ends in "\\n" (newline kept), and each line's start offset."""
    arr = np.frombuffer(block, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)
    offsets = np.empty(len(nl) + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = nl + 1
    binary = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(nl), [None, pa.py_buffer(offsets), pa.py_buffer(block)]
    )
    return binary, offsets


def _to_text(binary: pa.Array) -> tuple[pl.Series, pl.Series | None]:
    """Lines as text; on invalid UTF-8, U+FFFD replacements and the raw bytes of bad lines."""
    try:
        return pl.Series("line", binary.cast(pa.large_string())), None
    except pa.ArrowInvalid:
        texts, raws = [], []
        for raw in binary.to_pylist():
            try:
                texts.append(raw.decode("utf-8"))
                raws.append(None)
            except UnicodeDecodeError:
                texts.append(raw.decode("utf-8", "replace"))
                raws.append(raw)
        return pl.Series("line", texts, dtype=pl.String), pl.Series("raw", raws, pl.Binary)


class _YearTracker:
    """Years for renderings without one: --year, else an SGLang prefix, else the file time."""

    def __init__(self, ctx: ReadContext) -> None:
        self.ctx = ctx
        self.year: int | None = None
        self.last_month = 0

    def years(self, months: pl.Series, msgs: pl.Series) -> pl.Series:
        m = months.to_numpy()
        m = np.where(m == 0, np.nan, m)
        # A month smaller than the one before by half a year or more is a new year.
        prev = np.concatenate([[self.last_month or np.nan], m[:-1]])
        prev = pl.Series(prev).fill_nan(None).forward_fill().to_numpy()
        roll = np.nan_to_num((prev - m) >= 6).astype(np.int64)
        rolls = np.cumsum(roll)
        if self.year is None:
            self.year = self._first_year(rolls, msgs, m)
        years = self.year + rolls
        valid = ~np.isnan(m)
        if valid.any():
            self.last_month = int(m[valid][-1])
            self.year = int(years[valid][-1])
        return pl.Series("year", years)

    def _first_year(self, rolls: np.ndarray, msgs: pl.Series, months: np.ndarray) -> int:
        ctx = self.ctx
        if ctx.year is not None:
            ctx.note(f"year {ctx.year} from --year")
            return ctx.year
        found = msgs.str.extract(r"^\[(\d{4})-\d{2}-\d{2} ", 1)
        idx = found.is_not_null().arg_true()
        if len(idx):
            i = int(idx[0])
            year = int(found[i]) - int(rolls[i])
            ctx.note(f"year {year} inferred from an SGLang [YYYY-MM-DD …] prefix")
            return year
        if ctx.mtime is not None:
            t = dt.datetime.fromtimestamp(ctx.mtime, dt.UTC)
            first = months[~np.isnan(months)]
            year = t.year - (1 if len(first) and first[0] > t.month else 0)
            ctx.note(f"year {year} inferred from the file time (no --year, no SGLang prefix)")
            return year
        year = dt.datetime.now(dt.UTC).year
        ctx.note(f"year {year} assumed (current year: no --year, prefix or file time)")
        return year


def _timestamps(fmt: TextFormat, df: pl.DataFrame, years: _YearTracker, ctx: ReadContext):
    """(ts_us, mono_us) expressions' values for the header rows of one chunk."""
    none = pl.Series([None] * len(df), dtype=pl.Int64)
    ts = df["ts"] if "ts" in df.columns else none
    if fmt.clock == "realtime":
        parsed = ts.str.replace(r"Z$", "+0000").str.to_datetime(fmt.strptime, strict=False)
        return parsed.dt.epoch("us"), none
    if fmt.clock == "realtime-zone":
        tz = df["tz"]
        odd = tz.filter(~tz.is_in(["UTC", "GMT"]) & tz.is_not_null()).unique().to_list()
        for z in odd[:3]:
            ctx.note(f"time zone {z!r} read as UTC: render with TZ=UTC for exact times")
        parsed = ts.str.to_datetime(fmt.strptime, strict=False, time_zone="UTC")
        return parsed.dt.epoch("us"), none
    if fmt.clock == "realtime-noyear":
        ctx.note("times read as UTC (this rendering has no zone: render with TZ=UTC)")
        months = ts.str.slice(0, 3).replace_strict(MONTHS, default=0, return_dtype=pl.Int64)
        year = years.years(months, df["msg"].fill_null(""))
        full = pl.concat_str([year.cast(pl.String), pl.lit(" "), ts.str.replace(r"  ", " 0")])
        parsed = (
            pl.select(full).to_series().str.to_datetime(fmt.strptime, strict=False, time_zone="UTC")
        )
        return parsed.dt.epoch("us"), none
    if fmt.clock in ("unix", "monotonic"):
        parts = ts.str.split_exact(".", 1).struct.unnest()
        frac = parts["field_1"].str.pad_end(6, "0").str.slice(0, 6).cast(pl.Int64)
        us = parts["field_0"].cast(pl.Int64) * 1_000_000 + frac
        if fmt.clock == "unix":
            return us, none
        ctx.note("short-monotonic has no wall clock: ts_us left empty, mono_us kept")
        return none, us
    # cat: only an SGLang prefix in the message says when
    prefix = df["msg"].str.extract(_SGLANG_TS, 1)
    if prefix.is_not_null().any():
        ctx.note("cat has no metadata: times taken from SGLang [YYYY-MM-DD HH:MM:SS] prefixes")
    parsed = prefix.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_zone="UTC")
    return parsed.dt.epoch("us"), none


class TextReader:
    def __init__(self, fmt: TextFormat, ctx: ReadContext) -> None:
        self.fmt = fmt
        self.ctx = ctx
        self.regex = header_regex(fmt) if fmt.head else r"^(?P<msg>.*)\n?$"
        self.years = _YearTracker(ctx)
        self.boot: str | None = None  # from journalctl's "-- Boot ID --" lines
        self.entry_no = 0
        self.line_no = 0  # lines consumed before the current block

    def read(self, stream: BinaryIO) -> Iterator[pa.Table]:
        carry = b""
        eof = False
        while not eof:
            data = stream.read(CHUNK_BYTES)
            if not data:
                eof = True
                block = carry
                if block and not block.endswith(b"\n"):
                    block += b"\n"
                carry = b""
            else:
                block = carry + data
                cut = block.rfind(b"\n") + 1
                block, carry = block[:cut], block[cut:]
            if not block:
                continue
            out, keep_from = self._chunk(block, final=eof)
            if keep_from is not None:
                carry = block[keep_from:] + carry
            if out is not None and out.num_rows:
                yield out
        self.ctx.lines = self.line_no

    def _chunk(self, block: bytes, final: bool) -> tuple[pa.Table | None, int | None]:
        """Entries of a block, and the byte offset from which to re-read with the next one."""
        binary, offsets = _split_lines(block)
        lines, raw = _to_text(binary)
        caps = lines.str.extract_groups(self.regex).struct.unnest()
        is_hdr = caps["ts"].is_not_null() if self.fmt.head else caps["msg"].is_not_null()
        n = len(lines)
        keep_from = None
        if not final and self.fmt.head:
            # The last entry may continue in the next block: parse it again with that block.
            hdr_idx = is_hdr.arg_true()
            last = int(hdr_idx[-1]) if len(hdr_idx) else n
            if last == 0:
                if len(block) < MAX_CARRY_BYTES:
                    return None, 0
                last = n
            keep_from = int(offsets[last]) if last < n else None
            lines, caps, is_hdr = lines[:last], caps[:last], is_hdr[:last]
            raw = raw[:last] if raw is not None else None
            n = last
        df = caps.with_columns(
            line=lines,
            line_no=pl.int_range(self.line_no + 1, self.line_no + 1 + n, eager=True),
            hdr=is_hdr,
            raw=raw if raw is not None else pl.lit(None, pl.Binary),
        )
        self.line_no += n
        if self.fmt.name == "with-unit":
            unit_like = pl.any_horizontal(
                [pl.col("ident").str.ends_with(suf) for suf in _UNIT_SUFFIXES]
            )
            df = df.with_columns(
                unit=pl.when(unit_like).then(pl.col("ident")),
                ident=pl.when(~unit_like).then(pl.col("ident")),
            )
        if self.fmt.head and not bool(is_hdr.all()):
            df = self._fold(df)
        else:
            df = df.with_columns(line_last=pl.col("line_no"), boot_id=pl.lit(self.boot, pl.String))
        return self._table(df), keep_from

    def _fold(self, df: pl.DataFrame) -> pl.DataFrame:
        """Join continuation lines to their entry, take markers, quarantine the rest."""
        body = pl.col("line").str.strip_chars_end("\r\n")
        df = df.with_columns(
            marker=~pl.col("hdr") & pl.col("line").str.contains(_MARKER.pattern),
            boot_marker=pl.col("line").str.extract(_MARKER.pattern, 1),
            # Where each entry's message starts: its continuation lines are indented to it.
            plen=pl.when("hdr")
            .then(body.str.len_chars() - pl.col("msg").fill_null("").str.len_chars())
            .forward_fill(),
        )
        df = df.with_columns(
            cont=~pl.col("hdr")
            & ~pl.col("marker")
            & pl.col("plen").is_not_null()
            & (body.str.len_chars() >= pl.col("plen"))
            & (body.str.slice(0, pl.col("plen")).str.strip_chars(" ") == "")
        )
        ctx = self.ctx
        ctx.markers += int(df["marker"].sum())
        orphans = df.filter(~pl.col("hdr") & ~pl.col("marker") & ~pl.col("cont"))
        for ln, text in zip(orphans["line_no"].to_list(), orphans["line"].to_list(), strict=True):
            ctx.reject(ln, f"not a {self.fmt.name} line", text.rstrip("\r\n"))
        boot = pl.col("boot_marker").forward_fill()
        df = df.with_columns(
            msg=pl.when("hdr").then("msg").when("cont").then(body.str.slice(pl.col("plen"))),
            boot_id=boot.fill_null(self.boot) if self.boot is not None else boot,
            raw_msg=pl.when(pl.col("raw").is_not_null()).then(pl.col("raw")),
        )
        seen = df["boot_marker"].drop_nulls()
        if len(seen):
            self.boot = seen[-1]
        df = df.filter(pl.col("hdr") | pl.col("cont")).with_columns(entry=pl.col("hdr").cum_sum())
        if bool(df["hdr"].all()):
            return df.with_columns(line_last=pl.col("line_no"))
        return df.group_by("entry", maintain_order=True).agg(
            pl.all().exclude("msg", "line_no", "raw", "entry").first(),
            pl.col("msg").str.join("\n"),
            pl.col("line_no").first(),
            pl.col("line_no").max().alias("line_last"),
            pl.col("raw").drop_nulls().first(),
            pl.col("raw").is_not_null().any().alias("any_raw"),
            pl.col("line").alias("lines"),
            pl.col("raw").alias("raws"),
            pl.col("plen").alias("plens"),
        )

    def _table(self, df: pl.DataFrame) -> pa.Table:
        ctx = self.ctx
        if self.fmt.head:
            df = df.filter(pl.col("hdr"))
        n = len(df)
        ts_us, mono_us = _timestamps(self.fmt, df, self.years, ctx)
        nulls = pl.Series([None] * n, dtype=pl.String)
        host = df["host"] if "host" in df.columns else nulls
        if ctx.host is not None:
            host = host.fill_null(ctx.host)
        invalid = df["raw"].is_not_null() if "any_raw" not in df.columns else df["any_raw"]
        message_raw = pl.Series([None] * n, dtype=pl.Binary)
        if invalid.any():
            message_raw = _raw_messages(df, invalid)
        # Without --all journalctl prints "[N blob data]" instead of a non-text message.
        blob = df["msg"].str.contains(r"^\[[0-9.]+[KMGT]?B blob data\]$").fill_null(False)
        out = pl.DataFrame(
            {
                "entry_no": pl.int_range(self.entry_no, self.entry_no + n, eager=True),
                "ts_us": ts_us,
                "mono_us": mono_us,
                "boot_id": df["boot_id"],
                "host": host,
                "unit": df["unit"] if "unit" in df.columns else nulls,
                "ident": df["ident"] if "ident" in df.columns else nulls,
                "pid": df["pid"].cast(pl.Int64, strict=False) if "pid" in df.columns else None,
                "priority": pl.Series([None] * n, dtype=pl.Int8),
                "message": df["msg"],
                "message_raw": message_raw,
                "cursor": nulls,
                "line_first": df["line_no"],
                "line_last": df["line_last"],
                "truncated": blob,
                "invalid_utf8": invalid,
                "line_break": nulls,
                "fields": nulls,
            }
        )
        self.entry_no += n
        return out.to_arrow().cast(ENTRY_SCHEMA)


def _raw_messages(df: pl.DataFrame, invalid: pl.Series) -> pl.Series:
    """Exact message bytes of entries with invalid UTF-8 (rare: done row by row)."""
    out: list[bytes | None] = [None] * len(df)
    multi = "lines" in df.columns
    for i in invalid.arg_true().to_list():
        row = df.row(i, named=True)
        if multi:
            # Continuation lines are indented with spaces, the header is ASCII: the
            # message starts at the same offset in bytes as in characters.
            parts = [
                (raw if raw is not None else text.encode()).rstrip(b"\r\n")[plen:]
                for text, raw, plen in zip(row["lines"], row["raws"], row["plens"], strict=True)
            ]
            out[i] = b"\n".join(parts)
        else:
            b = row["raw"].rstrip(b"\r\n")
            head = len(row["line"].rstrip("\r\n")) - len(row["msg"])
            out[i] = b[head:]
    return pl.Series("message_raw", out, dtype=pl.Binary)


def read_text(stream: BinaryIO, fmt_name: str, ctx: ReadContext) -> Iterator[pa.Table]:
    yield from TextReader(TEXT_FORMATS[fmt_name], ctx).read(stream)
