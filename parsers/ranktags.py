"""The rank tag of SGLang's prefix (`[2026-07-21 08:04:41 DP0 TP1 EP1]`, the newer
`[… ATTN_CP7 TP7 EP7]`) as columns of every row read from a prefixed line: which data-,
tensor-, expert-, context- or pipeline-parallel rank logged it."""

from __future__ import annotations

import polars as pl

from .tables import RANK_TAGS

# the tags of the bracket that opens the line, dated or not (SGLANG_LOG_MS: ,123 / .123;
# `[ TP2]` where the date format is empty, Mooncake#1088)
_BRACKET = r"^\[(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)?((?: [A-Z_]+\d+)+)\]"
TAGS = {c.name: c.name.upper() for c in RANK_TAGS}  # column -> the prefix's word


def rank_tags(messages: pl.Series) -> pl.DataFrame:
    """One row per message: each tag's rank (null where the prefix does not state it).
    Each tag is read once a distinct tag string (a deployment has few), and each line's
    string looked up once, its ranks gathered (a lookup a tag cost six hash passes; a
    join half again as much)."""
    tags = messages.cast(pl.String).str.extract(_BRACKET, 1)
    distinct = tags.unique().drop_nulls()
    if not len(distinct):
        return pl.DataFrame({name: pl.repeat(None, len(tags), dtype=pl.Int64, eager=True)
                             for name in TAGS})  # fmt: skip
    at = tags.replace_strict(distinct, pl.int_range(len(distinct), dtype=pl.UInt32, eager=True),
                             default=None, return_dtype=pl.UInt32)  # fmt: skip
    return pl.DataFrame({
        name: distinct.str.extract(rf"(?:^| ){word}(\d+)(?: |$)", 1).cast(pl.Int64).gather(at)
        for name, word in TAGS.items()
    })  # fmt: skip
