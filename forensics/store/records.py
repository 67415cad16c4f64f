"""A source's forensic records, parsed while its entries are written.

Each batch a reader yields is parsed for records in a worker thread while the next batch
is read and written; results are handed on in order. Entries that ingest later drops
(overlap duplicates) or rewrites (LineMax rejoins) have their records dropped or re-read
(stage.py, register.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from ..parsers import templates
from ..parsers.namer import MAX_PAIRS
from ..parsers.patterns import Pattern, builtin, classify, record_rows
from ..parsers.ranktags import TAGS, rank_tags
from ..parsers.records import parse_records
from ..parsers.tables import PATTERN_TABLES

# record kind -> table: the probes' kinds, then the declared pattern tables
TABLES = {
    "checksum": "checksums", "canary": "canary", "step": "steps",
    **{t.kind: t.name for t in PATTERN_TABLES.values()},
    "line": "lines",
}  # fmt: skip
_PATTERN_KINDS = {table: kind for kind, table in TABLES.items()}
# what ingest counts as records: every entry has its line, so lines are not counted
COUNTED = [kind for kind in TABLES if kind != "line"]
PATTERNS = builtin()
_COLUMNS = ["entry_no", "line_first", "host", "ts_us", "priority", "message", "fields"]
# patterns whose lines keep their named values (few, and what a slice failure's NICs are)
VALUED = frozenset(p.name for p in PATTERNS if p.table in ("events", "transfers"))
# A source stores at most this many template texts (ids always): a million distinct lines
# no mask groups cost ids, not a million texts
MAX_TEXTS = 20_000
Reject = tuple[int, int, str, str]  # entry_no, line, reason, message
BACKLOG = 2  # groups of batches waiting for record parsing
# Batches are parsed in groups of about this many rows or bytes: each parse compiles its
# regexes and runs a few hundred polars plans whatever its size, and a step's repeated
# page lists are read once per group. On 16 MB batches of 4 kB lines (32 k rows), parsing
# four at once took 2.8 CPU-s where one at a time took 4.3 (200 MB). Larger groups cost
# memory: on the 742 MB journal 64 MB groups and a backlog of 3 peaked at 1.1 GB, a
# backlog of 2 at 0.88 GB (ingest 10.3 → 9.5 s against 32 MB groups); 128 MB groups and
# a backlog of 1 at 1.0–1.1 GB for no more speed (bench/README.md).
GROUP_ROWS = 200_000
GROUP_BYTES = 64 << 20
# A line's named values live as long as its group: a batch weighs its bytes or this much
# a value its lines will name (the last group's named values a byte; before any, the `=`
# of a sample of the first batch), whichever is more, so lines of 40 `key=value` pairs
# make groups of a twelfth the text (256 MB of them: 1.30 GB peak at 64 MB groups) while
# lines a pattern reads (probe records' `k=v`) keep whole groups. Not the sum: a value
# a 200-byte line adds nothing to the peak (mixed journal 0.89 GB either way), but made
# its groups smaller and ingest 5 % slower (bench/README.md)
PAIR_BYTES = 128
SAMPLE_LINES = 512


def _typed(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """Pattern fields are text: as the table's declared types."""
    return PATTERN_TABLES[table].cast(df)


def _patterned(
    entries: pl.DataFrame,
    user: list[Pattern],
    only: list[str] | None = None,
    tags: pl.DataFrame | None = None,
) -> tuple[dict[str, pl.DataFrame], pl.Series]:
    """SGLang's own lines (built-in and user table patterns): rows per record kind
    (`only` these tables where given), and the payload lines (patterns.classify)."""
    pats = PATTERNS + [p for p in user if p.table in TABLES.values()]
    if only is not None:  # payload patterns still say which lines no other reads
        pats = [p for p in pats if p.table in only or p.payload]
    found, payload = classify(pats, entries["message"].cast(pl.String))
    origin = pl.concat([entries.select(
        row=pl.int_range(pl.len(), dtype=pl.Int64), host="host", ts_us="ts_us", entry_no="entry_no"
    ), rank_tags(entries["message"]) if tags is None else tags], how="horizontal")  # fmt: skip
    rows = {
        _PATTERN_KINDS[table]: _typed(table, _own_ranks(origin.join(df, on="row", suffix="_own")))
        for table, df in found.items()
        if not df.is_empty() and (only is None or table in only)
    }
    return rows, payload


def _own_ranks(df: pl.DataFrame) -> pl.DataFrame:
    """A rank a record states itself (a span's tp_rank attribute) over its line's prefix's."""
    own = [c for c in TAGS if f"{c}_own" in df.columns]
    if not own:
        return df
    return df.with_columns(
        pl.coalesce(pl.col(f"{c}_own").cast(pl.Int64, strict=False), c).alias(c) for c in own
    ).drop([f"{c}_own" for c in own])


def _records_of(
    entries: pl.DataFrame,
    user: list[Pattern] = (),  # type: ignore[assignment]
) -> tuple[dict[str, pl.DataFrame], list[Reject]]:
    """Rows of every record table for these entries (the patterns' tables, the probes'
    records, and every line's template), and the records that break the contract."""
    tags = rank_tags(entries["message"])  # one read for every table of the group
    out, payload = _patterned(entries, list(user), tags=tags)
    named = [f.select("row", "pattern") for f in out.values()]
    out = {kind: f.drop("row") for kind, f in out.items()}
    recs, rejects = _contract(entries, user, payload)
    for kind, df in recs.items():
        out[kind] = df.drop("row")
        named.append(df.select("row", pattern=pl.lit(f"forensics:{kind}")))
    out["line"] = _lines(entries, named, user, tags)
    return out, rejects


def _lines(
    entries: pl.DataFrame, named: list[pl.DataFrame], user: list[Pattern], tags: pl.DataFrame
) -> pl.DataFrame:
    """Every entry's template row; a line a pattern reads is named by the first that does."""
    names = pl.repeat(None, len(entries), dtype=pl.String, eager=True).alias("pattern")
    if named:
        # the first name of each row by its first index in the concatenation: a sort of
        # ints in numpy, not a unique and a join over every row (0.11 → 0.03 s a group)
        rows = pl.concat([f["row"].cast(pl.Int64) for f in named]).to_numpy()
        at, first = np.unique(rows, return_index=True)
        names = names.scatter(at, pl.concat([f["pattern"] for f in named]).gather(first))
    components = {p.name: p.component for p in (*PATTERNS, *user)}
    priority = entries["priority"] if "priority" in entries.columns else None
    found = templates.lines(entries["message"].cast(pl.String), names, components, priority,
                            VALUED)  # fmt: skip
    return pl.concat([entries.select("host", "ts_us", "entry_no"), found,
                      tags], how="horizontal")  # fmt: skip


def _contract(
    entries: pl.DataFrame, user: list[Pattern], payload: pl.Series | None = None
) -> tuple[dict[str, pl.DataFrame], list[Reject]]:
    """The probes' records (and user patterns' record rows), with `row` into entries;
    none in `payload` lines (a prompt quoting a record is no record)."""
    matched = record_rows(list(user), entries["message"].cast(pl.String)) if user else None
    is_cand = pl.col("message").str.contains("forensics:", literal=True).fill_null(False) | pl.col(
        "fields"
    ).cast(pl.String).str.contains('"FORENSICS_KIND"', literal=True).fill_null(False)
    if matched is not None:
        is_cand = is_cand | pl.int_range(pl.len()).is_in(matched["row"].unique().implode())
    if payload is not None and len(payload):
        is_cand = is_cand & ~pl.int_range(pl.len()).is_in(payload.cast(pl.Int64).implode())
    with_row = entries.with_columns(_orig=pl.int_range(pl.len(), dtype=pl.Int64))
    cand = with_row.filter(is_cand)
    if cand.is_empty():
        return {}, []
    if matched is not None:  # rows of `entries` -> rows of `cand`
        renum = cand.select(_orig="_orig", row=pl.int_range(pl.len(), dtype=pl.Int64))
        matched = (
            matched.join(renum.rename({"row": "new"}), left_on="row", right_on="_orig")
            .drop("row")
            .rename({"new": "row"})
        )
    recs = parse_records(cand, matched)
    origin = cand.select(
        row=pl.int_range(pl.len(), dtype=pl.Int64),
        _orig="_orig",
        host="host",
        ts_us="ts_us",
        entry_no="entry_no",
    )
    out = {}
    for kind in ("checksum", "canary", "step"):
        df = getattr(recs, kind)
        if not df.is_empty():
            rows = origin.join(df, on="row").drop("row").rename({"_orig": "row"})
            if "t_us" in rows.columns:  # the watch's own time (written later, out of order)
                rows = rows.with_columns(ts_us=pl.coalesce("t_us", "ts_us")).drop("t_us")
            out[kind] = rows
    if not recs.rejects:
        return out, []
    # Only the rejected rows become Python objects (a message each: costly for all).
    bad = cand.select("entry_no", "line_first", "message")[[r for r, _ in recs.rejects]]
    rejects = [
        (no, line, reason, msg or "")
        for (no, line, msg), (_, reason) in zip(bad.iter_rows(), recs.rejects, strict=True)
    ]
    return out, rejects


def _batch_records(
    batch: pa.Table, user: list[Pattern]
) -> tuple[dict[str, pl.DataFrame], list[Reject]]:
    """Records of a batch that holds (at least) the columns in _COLUMNS."""
    return _records_of(pl.from_arrow(batch), user)  # type: ignore[arg-type]


def _pairs(messages: pa.ChunkedArray) -> float:
    """About how many `key=value` pairs these messages hold that the namer would keep,
    from their first SAMPLE_LINES (polars: the column may be a string view, which
    pyarrow's kernels do not take)."""
    sample = messages.slice(0, SAMPLE_LINES)
    if not len(sample):
        return 0.0
    per = pl.Series(sample).str.count_matches("=", literal=True).clip(0, MAX_PAIRS)
    return float(per.sum() or 0) * len(messages) / len(sample)


class RecordSink:
    """Records of the batches of one source, parsed in a worker, handed on in order to
    `put(table, rows)` (rows without `source_id`: a staged source has none yet)."""

    def __init__(
        self,
        put: Callable[[str, pl.DataFrame], None],
        run: str,
        user: list[Pattern] | None = None,
        weight: int = 1,
    ) -> None:
        self.put = put
        self.weight = weight  # a byte of the source's lines held at this many (formats.py)
        self.user = user or []
        self.run = run
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="forensics-records")
        self.pending: deque[tuple[Future, int]] = deque()  # and the group's bytes
        self.named_per_byte: float | None = None
        self.held: list[pa.Table] = []  # batches not yet submitted, and their size
        self.held_rows = self.held_bytes = 0
        self.counts = dict.fromkeys(TABLES, 0)
        self.rejects: list[Reject] = []
        self.texts: set[int] = set()  # templates whose text this source stores
        self.texts_dropped = 0  # templates stored without their text (past MAX_TEXTS)

    def submit(self, batch: pa.Table) -> None:
        part = batch.select(_COLUMNS)
        self.held.append(part)
        self.held_rows += part.num_rows
        if self.named_per_byte is None:
            self.named_per_byte = _pairs(part["message"]) / max(part.nbytes, 1)
        self.held_bytes += int(part.nbytes * max(self.weight, PAIR_BYTES * self.named_per_byte))
        if self.held_rows >= GROUP_ROWS or self.held_bytes >= GROUP_BYTES:
            self._flush()
        # Wait when parsing falls behind: a backlog of batches would grow with the input.
        while self.pending and (self.pending[0][0].done() or len(self.pending) > BACKLOG):
            self._stored(*self.pending.popleft())

    def _flush(self) -> None:
        if self.held:
            group = pa.concat_tables(self.held) if len(self.held) > 1 else self.held[0]
            self.pending.append((self.pool.submit(_batch_records, group, self.user),
                                 group.nbytes))  # fmt: skip
            self.held, self.held_rows, self.held_bytes = [], 0, 0

    def close(self) -> None:
        try:
            self._flush()
            while self.pending:
                self._stored(*self.pending.popleft())
        finally:
            self.pool.shutdown(cancel_futures=True)

    def _stored(self, done: Future, nbytes: int) -> None:
        """A group's records stored, and the named values a byte it held noted."""
        frames, rejects = done.result()
        if "line" in frames and nbytes:
            named = frames["line"]["named"].list.len().sum()
            self.named_per_byte = int(named or 0) / nbytes
        self.store(frames, rejects)

    def store(self, frames: dict[str, pl.DataFrame], rejects: list[Reject]) -> None:
        if "line" in frames:
            frames["line"] = self._capped(frames["line"])
        for kind, df in frames.items():
            self.put(TABLES[kind], df.with_columns(run=pl.lit(self.run)))
            self.counts[kind] += len(df)
        self.rejects += rejects

    def _capped(self, lines: pl.DataFrame) -> pl.DataFrame:
        """Template texts past the source's MAX_TEXTS dropped (their ids kept)."""
        new = set(lines["template"].unique().to_list()) - self.texts
        room = max(MAX_TEXTS - len(self.texts), 0)
        keep = sorted(new)[:room]
        self.texts.update(keep)
        self.texts_dropped += len(new) - len(keep)
        if len(keep) == len(new):
            return lines
        known = pl.Series(sorted(self.texts), dtype=pl.UInt64)
        return lines.with_columns(
            text=pl.when(pl.col("template").is_in(known.implode())).then("text")
        )

    def reread(self, entries: pl.DataFrame) -> None:
        """Records of entries whose message changed (rejoined), read again."""
        self.store(*_records_of(entries, self.user))


def _insert(
    con: duckdb.DuckDBPyConnection,
    columns: dict[str, list[str]],
    frames: dict[str, pl.DataFrame],
    run: str,
    source_id: int,
) -> dict[str, int]:
    """Rows per record kind into their tables, stamped with the source; rows stored."""
    stored = {}
    for kind, df in frames.items():
        table = TABLES[kind]
        df = df.with_columns(run=pl.lit(run), source_id=pl.lit(source_id, pl.Int32))
        con.from_arrow(df.select(columns[table]).to_arrow()).insert_into(table)
        stored[kind] = len(df)
    return stored


def reread(con: duckdb.DuckDBPyConnection, tables: list[str], chunk: int = GROUP_ROWS) -> dict:
    """Fill `tables` from the entries already stored, as ingest would have (an upgrade
    to a version that reads more of SGLang's lines): rows added per table. Built-in
    patterns only (a source's user patterns, stored with it, read their lines already)."""
    added = dict.fromkeys(tables, 0)
    columns = {t: [c.name for c in PATTERN_TABLES[t].all_columns] for t in tables}
    sources = con.execute("SELECT source_id, run FROM sources ORDER BY source_id").fetchall()
    for sid, run in sources:
        last = -1
        while True:
            entries = con.sql(
                f"""SELECT {", ".join(_COLUMNS)} FROM entries
                    WHERE source_id = {int(sid)} AND entry_no > {int(last)}
                    ORDER BY entry_no LIMIT {chunk}"""
            ).pl()
            if entries.is_empty():
                break
            last = entries["entry_no"][-1]
            frames, _ = _patterned(entries, [], only=tables)
            for kind, n in _insert(con, columns, frames, run, sid).items():
                added[TABLES[kind]] += n
    return added
