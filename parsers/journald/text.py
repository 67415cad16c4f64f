"""journalctl's text renderings (`short*`, `with-unit`, `cat`), parsed a chunk at a time.

Each chunk of lines becomes one Arrow string array without a Python object per line;
polars' regex engine splits the header off every line at once. Only chunks with
continuation lines (multi-line messages) or invalid UTF-8 take a slower path.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

from .blocks import blocks, line_start_cut, ordered_parallel
from .context import ReadContext
from .context import too_long as reason_too_long
from .schema import TS_MAX_US

# Only the header is matched (the regex stops at "ident[pid]: "); the message is the rest
# of the line, sliced off by length: matching the message too costs 30× more. The fast
# form excludes ":" and "[" from identifiers (a lazy match costs 3× more) and reads digits
# and the host as ASCII (Unicode classes cost the capture engine 1.6× more: 0.107 →
# 0.068 s a 142 k-line block); lines it misses get the general form. Where the fast form
# matches, the general one reads the same groups: its lazy identifier cannot stop before
# a ":" or "[" the fast one's holds none of, and ASCII digits and printable ASCII are
# digits and non-space.
_TAIL = r" (?P<host>\S+) (?P<ident>[^\n]*?)(?:\[(?P<pid>\d+)\])?:(?: |\r?\n|$)"
_TAIL_FAST = r" (?P<host>[!-~]+) (?P<ident>[^\[:\n]*)(?:\[(?P<pid>[0-9]+)\])?:(?: |\r?\n|$)"
_UNIT_SUFFIXES = (
    ".service", ".scope", ".slice", ".socket", ".mount", ".timer", ".target", ".swap", ".path",
    ".device", ".automount",
)  # fmt: skip
_MONTH_NAMES = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec"
MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES.split(), 1)}
_SGLANG_TS = r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})[^\]]*\]"
_BOOT_MARKER = r"^-- Boot ([0-9a-f]{32}) --$"
# Arrow string views hand the text to DuckDB without a copy, but DuckDB reads them only
# from 2.0 on ("Unsupported Internal Arrow Type vz" before): older ones get large strings.
_COMPAT = (
    pl.CompatLevel.newest()
    if int(version("duckdb").split(".")[0]) >= 2
    else pl.CompatLevel.oldest()
)


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
        TextFormat("short-monotonic", r"\[\s*(?P<ts>\d{1,9}\.\d{1,9})\]", "monotonic"),
        TextFormat("cat", "", "none"),
    ]
}


def header_regex(fmt: TextFormat, fast: bool = False) -> str:
    if fast:
        head = fmt.head.replace(r"\d", "[0-9]").replace(r"\S+", "[!-~]+")
        return "^(?P<hdr>" + head + _TAIL_FAST + ")"
    return "^(?P<hdr>" + fmt.head + _TAIL + ")"


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


def _timestamps(fmt: TextFormat, df: pl.DataFrame, notes: list[str]):
    """(ts_us, mono_us) of the header rows of one chunk (not for year-less renderings)."""
    none = pl.repeat(None, len(df), dtype=pl.Int64, eager=True)
    ts = df["ts"] if "ts" in df.columns else none
    if fmt.clock == "realtime":
        fixed = _utc_microseconds(ts)
        if fixed is not None:
            return fixed, none
        # journalctl writes +0000, never Z: the rewrite is for copies from elsewhere.
        if ts.str.ends_with("Z").any():
            ts = ts.str.replace(r"Z$", "+0000")
        parsed = ts.str.to_datetime(fmt.strptime, strict=False)
        return parsed.dt.epoch("us"), none
    if fmt.clock == "realtime-zone":
        tz = df["tz"]
        odd = tz.filter(~tz.is_in(["UTC", "GMT"]) & tz.is_not_null()).unique().to_list()
        notes += [f"time zone {z!r} read as UTC: render with TZ=UTC for exact times" for z in odd]
        parsed = ts.str.to_datetime(fmt.strptime, strict=False, time_zone="UTC")
        return parsed.dt.epoch("us"), none
    if fmt.clock in ("unix", "monotonic"):
        parts = ts.str.split_exact(".", 1).struct.unnest()
        frac = parts["field_1"].str.pad_end(6, "0").str.slice(0, 6).cast(pl.Int64, strict=False)
        secs = parts["field_0"].cast(pl.Int64, strict=False)
        # Beyond year 9999 a time is damage: no time, rather than an overflow.
        secs = pl.select(pl.when(secs <= TS_MAX_US // 1_000_000).then(secs)).to_series()
        us = secs * 1_000_000 + frac
        if fmt.clock == "unix":
            return us, none
        notes.append("short-monotonic has no wall clock: ts_us left empty, mono_us kept")
        return none, us
    if fmt.clock == "none":  # cat: only an SGLang prefix in the message says when
        prefix = df["msg"].str.extract(_SGLANG_TS, 1)
        if prefix.is_not_null().any():
            notes.append(
                "cat has no metadata: times taken from SGLang [YYYY-MM-DD HH:MM:SS] prefixes"
            )
        parsed = prefix.str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, time_zone="UTC")
        return parsed.dt.epoch("us"), none
    return none, none  # year-less: finished in order, once the year is known


def _utc_microseconds(ts: pl.Series) -> pl.Series | None:
    """Epoch µs of times as journalctl prints them with TZ=UTC ("2026-11-29T07:00:00.000104
    +0000", one width), by their digits: parsing each one with the format cost 0.6 µs a
    line, as much as matching the header itself. None where any time is in another form
    or out of range: those take the format (which gives null for what is no time)."""
    if not ((ts.str.len_bytes() == 31) & ts.str.ends_with("+0000")).fill_null(True).all():
        return None

    def num(at: int, n: int) -> pl.Expr:
        return pl.col("ts").str.slice(at, n).cast(pl.Int64, strict=False)

    parts = ts.to_frame("ts").select(
        day=pl.col("ts").str.slice(0, 10).str.to_date("%Y-%m-%d", strict=False),
        h=num(11, 2), m=num(14, 2), s=num(17, 2), us=num(20, 6),
    )  # fmt: skip
    clock = parts.select(
        ok=ts.is_null()
        | (
            (pl.col("h") < 24)
            & (pl.col("m") < 60)
            & (pl.col("s") < 60)
            & pl.col("us").is_not_null()
        )
    )["ok"]
    if not clock.all():
        return None
    day_us = parts["day"].cast(pl.Datetime("us")).dt.epoch("us")
    return parts.select(
        ts_us=pl.lit(day_us)
        + ((pl.col("h") * 60 + pl.col("m")) * 60 + pl.col("s")) * 1_000_000
        + pl.col("us")
    )["ts_us"]


def _noyear_timestamps(fmt: TextFormat, df: pl.DataFrame, years: _YearTracker) -> pl.Series:
    ts = df["ts"]
    months = ts.str.slice(0, 3).replace_strict(MONTHS, default=0, return_dtype=pl.Int64)
    year = years.years(months, df["message"].fill_null(""))
    full = pl.concat_str([year.cast(pl.String), pl.lit(" "), ts.str.replace(r"  ", " 0")])
    parsed = (
        pl.select(full).to_series().str.to_datetime(fmt.strptime, strict=False, time_zone="UTC")
    )
    return parsed.dt.epoch("us")


@dataclass
class _Parsed:
    """One block's entries, parsed independently of the others (in a worker thread)."""

    df: pl.DataFrame  # entry columns; boot_id null before the block's first boot marker
    quarantine: list[tuple[int, str, str]]
    markers: int
    last_boot: str | None
    notes: list[str]
    lines: int = 0  # the block's lines: line numbers above are the block's own, from 1


class TextReader:
    """Blocks of whole entries parse on their own in worker threads (see blocks.py); boot
    ids, years and numbering are settled in order in `_finish`."""

    def __init__(self, fmt: TextFormat, ctx: ReadContext) -> None:
        self.fmt = fmt
        self.ctx = ctx
        self.regex = header_regex(fmt) if fmt.head else None
        self.fast_regex = header_regex(fmt, fast=True) if fmt.head else None
        self.years = _YearTracker(ctx)
        self.boot: str | None = None  # from journalctl's "-- Boot ID --" lines
        self.entry_no = 0
        self.line_no = 0  # lines of the blocks finished so far

    def read(self, stream: BinaryIO) -> Iterator[pa.Table]:
        # journalctl indents continuation lines: a line not starting with a space starts
        # an entry (cat has no continuations: any line does).
        cut = line_start_cut(continuation_indent=self.regex is not None)

        def too_long(size: int) -> None:
            self.ctx.reject(self.line_no + 1, f"{reason_too_long(size)} (near this line)", "")

        yield from ordered_parallel(blocks(stream, cut, too_long), self._parse, self._finish)
        self.ctx.lines = self.line_no

    def _parse(self, block: bytes | bytearray) -> _Parsed:
        notes: list[str] = []
        # A two-byte search holds the GIL for 18 ms a 16 MB block; "\r" alone is a memchr
        # (1 ms), and only a block that has one is searched for "\r\n".
        if b"\r" in block and b"\r\n" in block:
            # Logs copied through Windows or some collectors: the CR is transport, not text
            # (left in, it hides "-- Boot … --" markers and ends every message).
            block = block.replace(b"\r\n", b"\n")
            notes.append("CRLF line ends read as LF")
        binary, _ = _split_lines(block)
        lines, raw = _to_text(binary)
        n = len(lines)
        line_no = pl.int_range(1, n + 1, eager=True)
        if self.regex is None:  # cat: every line is a message
            df = pl.DataFrame({"msg": lines.str.strip_suffix("\n"), "line_no": line_no})
            df = df.with_columns(
                line=lines, raw=raw if raw is not None else pl.lit(None, pl.Binary)
            )
            parsed = _Parsed(df, [], 0, None, notes)
        else:
            caps = self._headers(lines)
            plen = caps["hdr"].str.len_chars()
            start = plen.fill_null(0)
            df = caps.with_columns(
                plen=plen,
                # Every line of a block ends in "\n": the message is what lies between.
                msg=lines.str.slice(start, lines.str.len_chars() - start - 1),
                line=lines,
                line_no=line_no,
                hdr=caps["hdr"].is_not_null(),
                raw=raw if raw is not None else pl.lit(None, pl.Binary),
            )
            if self.fmt.name == "with-unit":
                unit_like = pl.any_horizontal(
                    [pl.col("ident").str.ends_with(suf) for suf in _UNIT_SUFFIXES]
                )
                df = df.with_columns(
                    unit=pl.when(unit_like).then(pl.col("ident")),
                    ident=pl.when(~unit_like).then(pl.col("ident")),
                )
            parsed = self._fold(df, notes)
        ts_us, mono_us = _timestamps(self.fmt, parsed.df, notes)
        parsed.df = self._columns(parsed.df, ts_us, mono_us)
        parsed.lines = n
        return parsed

    def _headers(self, lines: pl.Series) -> pl.DataFrame:
        assert self.regex is not None and self.fast_regex is not None
        caps = lines.str.extract_groups(self.fast_regex).struct.unnest()
        missed = caps["hdr"].is_null()
        if not missed.any():
            return caps
        idx = missed.arg_true()
        slow = lines.gather(idx).str.extract_groups(self.regex).struct.unnest()
        return caps.with_columns(caps[c].scatter(idx, slow[c]) for c in caps.columns)

    def _fold(self, df: pl.DataFrame, notes: list[str]) -> _Parsed:
        """Join continuation lines to their entry, take markers, quarantine the rest.

        Only the (few) lines that are not headers are classified; headers stay as they are.
        """
        n = len(df)
        if bool(df["hdr"].all()):
            return _Parsed(df.with_columns(boot_id=pl.lit(None, pl.String)), [], 0, None, notes)
        nh = (~df["hdr"]).arg_true()
        body = df["line"].gather(nh).str.strip_suffix("\n")
        # Continuation lines are indented to where their entry's message starts.
        plen = df["plen"].forward_fill().gather(nh)
        marker = body.str.starts_with("-- ") & body.str.ends_with(" --")
        cont = (
            ~marker
            & plen.is_not_null()
            & (body.str.len_chars() >= plen.fill_null(0))
            & (body.str.slice(0, plen.fill_null(0)).str.strip_chars(" ") == "")
        )
        orphan = ~marker & ~cont
        quarantine = []
        if orphan.any():
            nos = df["line_no"].gather(nh.filter(orphan)).to_list()
            reason = f"not a {self.fmt.name} line"
            quarantine = [
                (ln, reason, t) for ln, t in zip(nos, body.filter(orphan).to_list(), strict=True)
            ]
        # "-- Boot ID --" names the boot of the entries after it.
        boots = body.str.extract(_BOOT_MARKER, 1)
        has_boot = boots.is_not_null()
        boot = pl.repeat(None, n, dtype=pl.String, eager=True)
        last_boot = None
        if has_boot.any():
            boot = boot.scatter(nh.filter(has_boot), boots.filter(has_boot)).forward_fill()
            last_boot = boots.filter(has_boot)[-1]
        df = df.with_columns(boot_id=boot)
        markers = int(marker.sum())
        if not cont.any():
            # The raw line is only needed for continuations: don't copy it along.
            out = df.drop("line").filter("hdr")
            return _Parsed(out, quarantine, markers, last_boot, notes)
        cont_idx = nh.filter(cont)
        cont_msg = body.filter(cont).str.slice(plen.filter(cont))
        keep = df["hdr"].scatter(cont_idx, True)
        df = df.with_columns(
            msg=df["msg"].scatter(cont_idx, cont_msg), plen=df["plen"].forward_fill()
        )
        df = df.filter(keep).with_columns(entry=pl.col("hdr").cum_sum())
        out = df.group_by("entry", maintain_order=True).agg(
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
        return _Parsed(out, quarantine, markers, last_boot, notes)

    def _columns(self, df: pl.DataFrame, ts_us: pl.Series, mono_us: pl.Series) -> pl.DataFrame:
        """The entry columns (entry_no still block-relative; boot ids still local)."""
        invalid = df["raw"].is_not_null() if "any_raw" not in df.columns else df["any_raw"]
        message_raw = _raw_messages(df, invalid) if invalid.any() else None

        def col(name: str, dtype: pl.DataType = pl.String) -> pl.Expr:
            return pl.col(name) if name in df.columns else pl.lit(None, dtype)

        return df.select(
            entry_no=pl.int_range(0, pl.len(), dtype=pl.Int64),
            ts_us=pl.lit(ts_us),
            mono_us=pl.lit(mono_us),
            boot_id=col("boot_id"),
            host=col("host"),
            unit=col("unit"),
            ident=col("ident"),
            pid=col("pid").cast(pl.Int64, strict=False),
            priority=pl.lit(None, pl.Int8),
            message=pl.col("msg"),
            message_raw=pl.lit(message_raw) if message_raw is not None else pl.lit(None, pl.Binary),
            cursor=pl.lit(None, pl.String),
            line_first=pl.col("line_no"),
            line_last=col("line_last", pl.Int64).fill_null(pl.col("line_no")),
            truncated=pl.lit(_blob_placeholders(df["msg"])),
            invalid_utf8=pl.lit(invalid),
            line_break=pl.lit(None, pl.String),
            fields=pl.lit(None, pl.String),
            ts=col("ts"),
        )

    def _finish(self, parsed: _Parsed) -> pa.Table:
        """What depends on the blocks before: numbering, boot ids, years; then Arrow."""
        ctx = self.ctx
        before = self.line_no
        for line, reason, raw in parsed.quarantine:
            ctx.reject(before + line, reason, raw)
        for note in parsed.notes:
            ctx.note(note)
        ctx.markers += parsed.markers
        df = parsed.df
        n = len(df)
        exprs = [
            pl.col("entry_no") + self.entry_no,
            pl.col("line_first") + before,
            pl.col("line_last") + before,
        ]
        if self.boot is not None:
            exprs.append(pl.col("boot_id").fill_null(self.boot))
        if self.fmt.clock == "realtime-noyear" and n:
            ctx.note("times read as UTC (this rendering has no zone: render with TZ=UTC)")
            exprs.append(pl.lit(_noyear_timestamps(self.fmt, df, self.years)).alias("ts_us"))
        if ctx.host is not None:
            exprs.append(pl.col("host").fill_null(ctx.host))
        df = df.with_columns(exprs).drop("ts")
        if parsed.last_boot is not None:
            self.boot = parsed.last_boot
        self.entry_no += n
        self.line_no += parsed.lines
        return df.to_arrow(compat_level=_COMPAT)


def _blob_placeholders(msg: pl.Series) -> pl.Series:
    """Messages that are journalctl's "[N blob data]" for a value it did not print (no
    --all). The regex runs only where a message ends so: on every one it cost 6 ms a
    100 k lines."""
    near = msg.str.ends_with(" blob data]").fill_null(False)
    if not near.any():
        return near
    exact = msg.filter(near).str.contains(r"^\[[0-9.]+[KMGT]?B blob data\]$").fill_null(False)
    return near.scatter(near.arg_true(), exact)


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
                (raw if raw is not None else text.encode()).removesuffix(b"\n")[plen:]
                for text, raw, plen in zip(row["lines"], row["raws"], row["plens"], strict=True)
            ]
            out[i] = b"\n".join(parts)
        else:
            # The header is ASCII: its length in characters is its length in bytes.
            out[i] = row["raw"].removesuffix(b"\n")[row.get("plen") or 0 :]
    return pl.Series("message_raw", out, dtype=pl.Binary)


def read_text(stream: BinaryIO, fmt_name: str, ctx: ReadContext) -> Iterator[pa.Table]:
    yield from TextReader(TEXT_FORMATS[fmt_name], ctx).read(stream)
