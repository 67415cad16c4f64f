"""Log prefixes taken off the front of each line (patterns/masks.toml's [[prefix]] rules,
in order), for the masker and the value namer.

A rule is a regex pass, and a pass costs about 90 ns a line whatever it finds (polars
calls the regex once a row): thirteen rules were 0.16 s a 145 k-line group, more than
the masks. So a rule marked `every` (a prefix nearly every line of its stack carries, or
a suffix) is tried on every line, and each run of the others between two such on only
the lines their alternation matches, one pass. The text is the same: a line none of a
run's rules matches is one each of them leaves as it is (bench/README.md)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from .masks import Rule


def strip(text: pl.Series, rules: Sequence[Rule], keep: bool = False) -> pl.Series:
    """`text` with each rule's prefix replaced by its `to` (by its `keep`, where it has
    one and `keep` is set: what the namer reads)."""
    run: list[Rule] = []
    for r in rules:
        if r.every:
            text = _gated(text, run, keep)
            run = []
            text = text.str.replace(r.regex, _to(r, keep))
        else:
            run.append(r)
    return _gated(text, run, keep)


def _to(r: Rule, keep: bool) -> str:
    return r.keep if keep and r.keep is not None else r.to


def _gated(text: pl.Series, run: list[Rule], keep: bool) -> pl.Series:
    """The run's rules in order, on the lines one of them matches."""
    if len(run) < 2:
        return text.str.replace(run[0].regex, _to(run[0], keep)) if run else text
    rows = text.str.contains("|".join(f"(?:{r.regex})" for r in run)).arg_true()
    if not len(rows):
        return text
    some = text.gather(rows)
    for r in run:
        some = some.str.replace(r.regex, _to(r, keep))
    return text.clone().scatter(rows, some)  # a copy: the caller's series stays as it was
