"""Every line a template: its message with the variable parts masked, an id that is a
pure function of that text, the level the line states, the part of the stack it comes
from, and the `key=value` / `key: value` pairs it carries.

A deterministic masker, not a miner: drain-style miners (drain3) group by arrival order,
so the same line would get another id in another source, order or `--ray` worker, and
dedupe, `sources remove` and shards would stop being exact (bench/templates.py measures
both; bench/README.md has the rows). The rules are data (patterns/masks.toml), applied
over the whole column with polars: Python touches only each distinct template once, to
hash it.

A line a pattern already names takes the pattern's name as its template (`name_of`).
"""

from __future__ import annotations

import hashlib
import re

import polars as pl

from . import prefixes
from .masks import Rule, rules
from .namer import named as name_values

# A template's id is a hash of its text alone: ID_SEED never changes (it was the masker's
# version, 1, when ids were first written, so every id stored since stays what it was). The
# masker's version is stored beside each line (`lines.masker`): a masker change moves the
# ids of the lines whose text it changes, and only those (tests/data/template-ids.tsv
# lists each one it moved, and why).
ID_SEED = "1"
MASKER = 2  # 1: until issue 52; 2: identifiers one <id>, c10d/vLLM/NIXL/LMCache prefixes
MAX_MASKED = 1_000  # characters of a message read: masking is bounded on a 100 kB line
MAX_TEXT = 300  # characters of a template's text
LEVELS = ("debug", "info", "warning", "error", "critical")
# journald's PRIORITY, where the line states no level; 6 (info) is what every stdout
# line gets, so it says nothing and is left out
PRIORITY = {0: "critical", 1: "critical", 2: "critical", 3: "error", 4: "warning",
            5: "info", 7: "debug"}  # fmt: skip


def _of(kind: str) -> list[Rule]:
    return [r for r in rules() if r.kind == kind]


def mask(messages: pl.Series) -> pl.Series:
    """The template text of each message (first MAX_MASKED characters read)."""
    s = messages.cast(pl.String).str.slice(0, MAX_MASKED)
    if not len(s):  # every line a pattern's: no rule compiled for none
        return s
    ansi, *masks = _of("mask")
    s = s.str.replace_all(ansi.regex, ansi.to)
    s = prefixes.strip(s, _of("prefix"))
    for r in masks:
        s = s.str.replace_all(r.regex, r.to)
    return s.str.strip_chars().str.slice(0, MAX_TEXT)


def template_ids(texts: pl.Series, salt: str = "t") -> pl.Series:
    """A stable 64-bit id per text: blake2b of the masker's version and the text (never a
    dataframe library's hash, which changes between versions). Hashed once per distinct
    text."""
    distinct = texts.unique().drop_nulls()
    ids = [_hash(salt, t) for t in distinct.to_list()]
    lookup = pl.DataFrame({"t": distinct, "id": pl.Series(ids, dtype=pl.UInt64)})
    return pl.DataFrame({"t": texts}).join(lookup, on="t", how="left", maintain_order="left")["id"]


def _hash(salt: str, text: str) -> int:
    h = hashlib.blake2b(f"{ID_SEED}\x00{salt}\x00{text}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big")


def pattern_id(name: str) -> int:
    """The template id of lines a pattern (or a probe record kind) names."""
    return _hash("p", name)


def levels(messages: pl.Series, priority: pl.Series | None = None) -> pl.Series:
    head = messages.cast(pl.String).str.slice(0, 120)
    found = []
    for r in _of("level"):
        word = _extract_where(head, r)
        found.append(word.replace_strict(r.map, default=None, return_dtype=pl.String))
    if priority is not None:
        found.append(
            priority.cast(pl.Int64).replace_strict(PRIORITY, default=None, return_dtype=pl.String)
        )
    frame = pl.DataFrame({f"_{i}": f for i, f in enumerate(found)})
    return frame.select(pl.coalesce(pl.all()).alias("level")).to_series()


def _extract_where(head: pl.Series, r: Rule) -> pl.Series:
    """The rule's group 1 in each head, its regex run only on the heads holding one of
    its map's words: a level is a word of the map, so a head without one has none (a
    literal scan, SIMD; a lazy `^.{0,72}?` before a word boundary cost 0.09 s a 360
    k-line group, most of whose lines state no level). Words of one or two letters
    (glog's I/W/E/F) would select nearly every line: their rule runs on all."""
    if min(map(len, r.map), default=0) < 3:
        return head.str.extract(r.regex, 1)
    words = "|".join(re.escape(w) for w in sorted(r.map, key=len, reverse=True))
    frame = pl.DataFrame({"h": head, "c": head.str.contains(words).fill_null(False)})
    return frame.select(pl.when("c").then(pl.col("h").str.extract(r.regex, 1))).to_series()


def components(messages: pl.Series) -> pl.Series:
    head = messages.cast(pl.String).str.slice(0, 400)  # a Dynamo line's spans come first
    expr: pl.Expr | None = None
    for r in reversed(_of("component")):  # the first rule that matches wins
        hit = pl.col("m").str.contains(r.regex)
        expr = (
            pl.when(hit)
            .then(pl.lit(r.name))
            .otherwise(expr if expr is not None else pl.lit(None, pl.String))
        )
    assert expr is not None
    return pl.DataFrame({"m": head}).select(expr.alias("component")).to_series()


def named(messages: pl.Series) -> pl.Series:
    """Each message's named values as a list of {key, value} (parsers/namer.py)."""
    return name_values(messages)


def lines(
    messages: pl.Series,
    names: pl.Series,
    components_of: dict[str, str],
    priority: pl.Series | None = None,
    valued: frozenset[str] = frozenset(),
) -> pl.DataFrame:
    """One row per message: `template`, `text`, `pattern`, `level`, `component`, `named`,
    `masker`.
    `names`: the pattern that reads each line (null: none does; such a line is masked);
    `components_of`: a pattern's component; `valued`: the patterns whose lines keep their
    named values too (events: a slice failure's NICs and length)."""
    messages = messages.fill_null("")  # an entry without a message is a template too
    unread = names.is_null()
    rest = messages.filter(unread)
    masked = mask(rest)
    # one namer pass for the masked lines and the valued patterns' (its cost is mostly fixed)
    keep = unread | names.is_in(list(valued))
    values = named(messages.filter(keep))
    at_keep = keep.cast(pl.UInt32).cum_sum() - 1  # a kept line's place in `values`
    frame = pl.DataFrame({"pattern": names, "level": levels(messages, priority)})
    rest_rows = pl.DataFrame(
        {"text": masked, "component": components(rest),
         "named": values.gather(at_keep.filter(unread))}
    ).with_columns(template=template_ids(masked))  # fmt: skip
    idx = pl.int_range(len(messages), eager=True, dtype=pl.UInt32)
    by_name = _by_name(frame.with_columns(_i=idx, _v=at_keep), values, valued,
                       components_of, rest_rows.schema["named"])  # fmt: skip
    by_text = frame.with_columns(_i=idx).filter(pl.col("pattern").is_null())
    by_text = pl.concat([by_text, rest_rows], how="horizontal")
    cols = ["_i", "template", "text", "pattern", "level", "component", "named"]
    parts = [f.select(cols) for f in (by_name, by_text) if len(f)]
    masker = pl.lit(MASKER, dtype=pl.Int16).alias("masker")
    if len(parts) == 1:  # each side is in order: only two need the sort
        return parts[0].drop("_i").with_columns(masker)
    return (pl.concat([by_name.select(cols), by_text.select(cols)]).sort("_i").drop("_i")
            .with_columns(masker))  # fmt: skip


def _by_name(
    frame: pl.DataFrame,
    values: pl.Series,
    valued: frozenset[str],
    components_of: dict[str, str],
    named_type: pl.DataType,
) -> pl.DataFrame:
    """The rows of lines a pattern reads: the pattern's name as their text; the `valued`
    patterns' lines keep their named values too (`values` at `_v`)."""
    by_name = frame.filter(pl.col("pattern").is_not_null()).with_columns(
        text=pl.col("pattern"),
        component=pl.col("pattern").replace_strict(components_of, default="sglang"),
        named=pl.lit(None, named_type),
    )
    by_name = by_name.with_columns(template=template_ids(by_name["text"], salt="p"))
    keep = by_name["pattern"].is_in(list(valued))
    if keep.any():
        at = by_name["_v"].filter(keep)
        found = pl.DataFrame({"_i": by_name["_i"].filter(keep), "named": values.gather(at)})
        by_name = by_name.drop("named").join(found, on="_i", how="left", maintain_order="left")
    return by_name
