"""Where a payload line's own fields are: outside its quoted strings.

A Receive or Finish line's request repr holds the client's text in quoted strings
(`text='…'`, `out={'text': '…'}`), and a prompt can quote `rid='…'`, `bootstrap_room=…`
or `'meta_info': {` (an agent reading its own server's logs). The line's own key is the
first occurrence outside every string: Python reprs' '…' and "…" and JSON's "…", with
backslash escapes. Read in Python, and only for the few lines where a key occurs more
than once (the column's first match is right everywhere else).
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

_QUOTING = re.compile(r"""['"\\]""")


def _strings(line: str, upto: int) -> list[tuple[int, int]]:
    """(opening quote, closing quote) of each string starting before `upto`; an unclosed
    one runs to the end."""
    out = []
    quote, opened, escaped = None, 0, -1
    for t in _QUOTING.finditer(line):
        ch, i = t.group(), t.start()
        if i == escaped:
            continue
        if quote is None:
            if i >= upto:
                break
            if ch != "\\":
                quote, opened = ch, i
        elif ch == "\\":
            escaped = i + 1
        elif ch == quote:
            out.append((opened, i))
            quote = None
    if quote is not None:
        out.append((opened, len(line)))
    return out


def first_outside(line: str, matches: list[re.Match]) -> re.Match | None:
    """The first of `matches` (in order) that starts outside the line's strings."""
    if not matches:
        return None
    spans = _strings(line, matches[-1].start() + 1)
    for m in matches:
        if not any(a < m.start() <= b for a, b in spans):
            return m
    return None


@lru_cache(maxsize=256)
def _compiled(regex: str) -> re.Pattern | None:
    try:
        return re.compile(regex)
    except re.error:  # the regex crate's syntax Python lacks: the first match stands
        return None


def outside_strings(lines: pl.Series, regex: str) -> pl.Series:
    """Group 1 of each line's first match of `regex`, but where a line has several, of
    the first that starts outside its strings. One scan finds every match (an extract
    and a count scanned a 4 kB prompt twice: 1.2-1.5 against 1.0 µs a Receive line);
    the group is read again from the first match alone (a field's regex does not look
    past its match). Where Python cannot read the regex (the regex crate's own syntax),
    the first match stands."""
    every = lines.str.extract_all(regex)
    first = every.list.first().str.extract(regex, 1)
    many = (every.list.len() > 1).fill_null(False)
    rx = _compiled(regex)
    if rx is None or not many.any():
        return first
    at = many.arg_true()
    got = []
    for line in lines.gather(at).to_list():
        m = first_outside(line, list(rx.finditer(line)))
        got.append(None if m is None else m.group(1))
    return first.scatter(at, pl.Series(got, dtype=pl.String))
