"""The values a line names: what `key=value`, `phrase: value`, `noun id`, a count before
its noun and a peer after `from`/`to` say, each under the name the line states
(patterns/masks.toml's [[value]] rules: data, with samples). A line a pattern reads has the
pattern's fields; this names what a line no pattern reads leaves in text.

Vectorised: each rule is one `extract_all` over the column, its matches split by the same
regex, then taken out of the text (`replace_all`) so the next rule never names a span
twice; Python never sees a line."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import polars as pl

from . import prefixes
from .masks import rules

if TYPE_CHECKING:
    from .masks import Rule

MAX_MASKED = 1_000  # characters of a message read
MAX_PAIRS = 16  # named values kept per line; past it, LEFT_OUT says how many were not
MAX_VALUE = 200  # characters of a value; a longer one is cut and ends in CUT
MAX_KEY = 40  # characters of a name
LEFT_OUT = "(left out)"  # the name whose value counts a line's values past MAX_PAIRS
CUT = "…"
TAKEN = "\x1f"  # what a named span leaves: no word, no value, a boundary
# words after which a phrase's name begins ("detected by watchdog at work" names `work`;
# "Registered Prefill boostrap" names `prefill_boostrap`: a verb before the noun)
STOP = (
    r"is|are|was|were|not|by|at|for|on|in|of|the|with|from|and|an|using|via|after|before"
    r"|found|loaded|registered|discovered"
)
# a level word in capitals is a prefix, never a name (uvicorn's `INFO:     10.0.0.1:41698`)
LEVELS = ["INFO", "DEBUG", "WARNING", "WARN", "TRACE", "CRITICAL", "FATAL", "NOTICE", "ERROR"]


@lru_cache(maxsize=1)
def _rules() -> tuple:
    return tuple(r for r in rules() if r.kind == "value")


def _prefixless(text: pl.Series) -> pl.Series:
    """The message without its log prefix (glog's time and thread are no values of it);
    a prefix that states a value (NCCL's device, c10d's rank) leaves it as `key=N`."""
    return prefixes.strip(text, [r for r in rules() if r.kind == "prefix"], keep=True)


def _needles(text: pl.Series) -> dict[str, pl.Series]:
    """Each rule's needle's rows, found once on the whole text (taking spans out only
    removes text: a row that lacked a needle still lacks it)."""
    needles = sorted({r.needle for r in _rules() if r.needle is not None})
    exprs = [(pl.col("t").str.contains(n[3:]) if n.startswith("re:")
              else pl.col("t").str.contains(n, literal=True)).alias(str(i))
             for i, n in enumerate(needles)]  # fmt: skip
    found = pl.DataFrame({"t": text}).select(exprs)
    return {n: found[str(i)].arg_true() for i, n in enumerate(needles)}


def _matches(text: pl.Series, rule: Rule) -> pl.DataFrame:
    found = (
        pl.DataFrame({"m": text.str.extract_all(rule.regex)})
        .with_row_index("row")
        .explode("m")
        .drop_nulls("m")
    )
    if rule.split is not None:  # key SEP value: split at the first SEP, no second regex pass
        kv = found["m"].str.splitn(rule.split, 2).struct
        return pl.DataFrame({"row": found["row"], "key": kv.field("field_0").str.strip_chars(),
                             "value": kv.field("field_1").cast(pl.String)})  # fmt: skip
    groups = found["m"].str.extract_groups(rule.regex).struct
    fields = groups.fields
    key = groups.field("key") if "key" in fields else pl.Series([rule.to] * len(found))
    value = groups.field("value").cast(pl.String)
    if "count" in fields:  # `0 cached blocks: 1569.0`: the count is the phrase's value
        value = pl.select(pl.coalesce(groups.field("count"), value)).to_series()
    return pl.DataFrame({"row": found["row"], "key": key.cast(pl.String), "value": value})


_NONE = pl.DataFrame(schema={"row": pl.UInt32, "key": pl.String, "value": pl.String})


def _apply(text: pl.Series, rule: Rule, rows: pl.Series | None) -> tuple[pl.DataFrame, pl.Series]:
    """The rule's matches (row, key, value) and the text with them taken out, tried only
    on `rows` (those holding its needle; None: every row)."""
    if rows is not None and not len(rows):  # no line holds its needle: nothing to run
        return _NONE, text
    sub = text if rows is None else text.gather(rows)
    found = _matches(sub, rule)
    if not len(found):
        return found, text
    taken = sub.str.replace_all(rule.regex, TAKEN)
    if rows is None:
        return found, taken
    return found.with_columns(row=rows.gather(found["row"])), text.scatter(rows, taken)


def _key(expr: pl.Expr, aliases: dict[str, str]) -> pl.Expr:
    name = (
        expr.str.replace_all(r"([a-z0-9])([A-Z])", "${1}_${2}")
        .str.to_lowercase()
        .str.extract(r"([^.]*)$")  # an attribute path's last part: decode_req.req.rid
        .str.replace_all("#", "n_")
        .str.replace_all(r"[^a-z0-9]+", "_")
        .str.strip_chars("_")
    )
    # a phrase the line states starts after its last stop word; an identifier
    # (nixlNotFoundError) is one word, never cut
    name = pl.when(expr.str.contains(" ")).then(
        name.str.replace(rf"^(?:.*_)?(?:{STOP})_", "")).otherwise(name)  # fmt: skip
    return name.replace(aliases) if aliases else name


NAMED = pl.List(pl.Struct({"key": pl.String, "value": pl.String}))
CHUNK = 16_384  # messages named at once at most
CHUNK_BYTES = 2 << 20  # and about this much text: every pair a chunk holds is a row a rule


def named(messages: pl.Series) -> pl.Series:
    """Each message's named values as a list of {key, value} (the first MAX_PAIRS), null
    where it names none. In chunks of at most CHUNK messages and about CHUNK_BYTES of text:
    the matches of every rule are rows before they are lists, and 125 k lines of 40
    `key=value` pairs each held 2.9 GB at once (bench/README.md)."""
    if not len(messages):  # a group whose every line a pattern reads: the rules cost 17 ms
        return pl.Series("named", [], dtype=NAMED)
    chunks = _chunks(messages.cast(pl.String))
    if len(chunks) <= 1:
        return _named(messages)
    return pl.concat([_named(messages.slice(i, n)) for i, n in chunks])


def _chunks(messages: pl.Series) -> list[tuple[int, int]]:
    """(offset, length) of consecutive chunks: CHUNK messages or CHUNK_BYTES of the text
    the namer reads, whichever comes first (one message at least)."""
    import numpy as np

    size = messages.str.len_bytes().fill_null(0).clip(0, MAX_MASKED).to_numpy()
    if len(size) <= CHUNK and int(size.sum()) <= CHUNK_BYTES:
        return [(0, len(size))] if len(size) else []
    ends = np.cumsum(size)
    out, i, n = [], 0, len(size)
    while i < n:
        before = ends[i - 1] if i else 0
        j = int(np.searchsorted(ends, before + CHUNK_BYTES, side="right"))
        j = min(max(j, i + 1), i + CHUNK, n)
        out.append((i, j - i))
        i = j
    return out


def _named(messages: pl.Series) -> pl.Series:
    text = _prefixless(messages.cast(pl.String).str.slice(0, MAX_MASKED).fill_null(""))
    holding = _needles(text)
    parts = []
    for r in _rules():
        found, text = _apply(text, r, None if r.needle is None else holding[r.needle])
        parts.append(found)
    rows = _capped(_normalised(pl.concat(parts)))
    out = pl.DataFrame({"row": pl.int_range(len(text), eager=True, dtype=pl.UInt32)})
    return out.join(rows, on="row", how="left", maintain_order="left")["named"]


def _normalised(found: pl.DataFrame) -> pl.DataFrame:
    """(row, key, value) with names normalised, values cleaned and cut, one value said
    twice under one name once ([rank0]: … [Rank 0]), and names made unique (`_2`)."""
    aliases = {k: v for r in _rules() for k, v in r.map.items()}
    # a few distinct names over many values: each normalised once, then looked up
    raw = found["key"].unique().drop_nulls()
    norm = pl.DataFrame({"raw": raw}).select(_key(pl.col("raw"), aliases).str.slice(0, MAX_KEY))
    return (
        found.filter(~pl.col("key").is_in(LEVELS))
        .with_columns(
            key=pl.col("key").replace_strict(raw, norm.to_series(), default=None),
            value=pl.col("value")
            .str.strip_chars()
            .str.replace(r"^b'(.*)'$", "${1}")  # a Python bytes repr: agent=b'a3e-prod-0001'
            .str.strip_chars("'\"")
            .str.strip_chars_end("."),
        )
        .filter((pl.col("key") != "") & (pl.col("value") != ""))
        .unique(["row", "key", "value"], keep="first", maintain_order=True)
        .with_columns(
            value=pl.when(pl.col("value").str.len_chars() > MAX_VALUE)
            .then(pl.col("value").str.slice(0, MAX_VALUE - 1) + CUT)
            .otherwise(pl.col("value")),
        )
        .pipe(_suffixed)
    )


def _suffixed(rows: pl.DataFrame) -> pl.DataFrame:
    """A name a line gives twice: `_2`, `_3` after the first. Counted only over the rows
    that share a name (a window over every row cost 0.47 s of a 0.85 s chunk)."""
    dup = rows.select(pl.struct("row", "key").is_duplicated()).to_series()
    if not dup.any():
        return rows
    at = dup.arg_true()
    n = rows[at].select(pl.col("key").cum_count().over(["row", "key"])).to_series()
    keys = rows["key"].gather(at)
    renamed = pl.select(pl.when(n > 1).then(keys + "_" + n.cast(pl.String)).otherwise(keys))
    return rows.with_columns(rows["key"].scatter(at, renamed.to_series()))


def _capped(rows: pl.DataFrame) -> pl.DataFrame:
    """Each row's values as a list, the first MAX_PAIRS, and LEFT_OUT with how many more.
    The marker is a row of its own before the lists are made (a list built by when/then
    left nulls of a non-zero length after the join on polars 1.35: pyarrow refuses them)."""
    counts = rows.group_by("row", maintain_order=True).len()
    over = counts.filter(pl.col("len") > MAX_PAIRS)
    kept = rows.group_by("row", maintain_order=True).head(MAX_PAIRS).select("row", "key", "value")
    if len(over):
        marks = over.select("row", key=pl.lit(LEFT_OUT),
                            value=(pl.col("len") - MAX_PAIRS).cast(pl.String))  # fmt: skip
        kept = pl.concat([kept, marks])
    return kept.group_by("row", maintain_order=True).agg(pl.struct("key", "value").alias("named"))
