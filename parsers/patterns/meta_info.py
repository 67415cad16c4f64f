"""The meta_info object of SGLang's Finish lines, read as a literal and never evaluated.

At the default --log-requests-level a Finish line is no Python literal as a whole: long
values are elided as `'…' ...` and the request object is a dataclass repr. Its
`'meta_info': {…}` span is one, so only that span is cut out (brace-matched, quotes and
escapes respected, at most MAX_SPAN characters) and read: as JSON for the JSON form, by
`ast.literal_eval` for the repr. What is not a literal is a note in `extra`, never a
reason to lose the line.

An --export-metrics-to-file record is the meta_info object itself, one JSON line, with
`request_parameters` (the request, a JSON text: its prompt too) beside its keys: read
whole (`whole=True`), without the request, which is no meta_info.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re

import orjson
import polars as pl

from ..tables import REQUEST_META
from .quoted import first_outside

MAX_SPAN = 64 << 10  # meta_info with per-token logprobs can be huge: past this, a note
MAX_LINE = 16 << 20  # a whole-line record holds its prompt: JSON that long is still read
_START = re.compile(r"""['"]meta_info['"]\s*:\s*\{""")
_SIGNIFICANT = re.compile(r"""[{}'"\\]""")  # all the brace walk has to look at
# meta_info key -> request_meta column (finish_reason is spread separately)
KEYS = {
    "id": "rid",
    "prompt_tokens": "prompt_tokens",
    "completion_tokens": "completion_tokens",
    "cached_tokens": "cached_tokens",
    "num_retractions": "num_retractions",
    "e2e_latency": "e2e_latency",
    "dp_rank": "dp_rank",
}
# request_meta's columns but the room (the line's, not meta_info's)
COLUMNS = [c for c in REQUEST_META.fields if c != "room"]


def span(line: str) -> str | None:
    """The `{…}` after meta_info, brace-matched outside quoted strings; None if absent,
    unbalanced or longer than MAX_SPAN. Named more than once (a reply's text can quote
    one), the meta_info outside the line's strings."""
    starts = list(_START.finditer(line))
    m = starts[0] if len(starts) == 1 else first_outside(line, starts)
    if m is None:
        return None
    start = m.end() - 1
    depth = 0
    quote = None
    escaped = -1  # the index a backslash escapes
    for t in _SIGNIFICANT.finditer(line, start, min(len(line), start + MAX_SPAN)):
        ch, i = t.group(), t.start()
        if i == escaped:
            continue
        if quote:
            if ch == "\\":
                escaped = i + 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return line[start : i + 1]
    return None


_STRING = re.compile(r"'[^'\n]*'")  # a repr's string: no quote inside (repr uses " then)
_BIG = re.compile(r"\d{19}")  # maybe past what orjson keeps exact (< -2^63, > 2^64)


def as_json(text: str) -> str | None:
    """A Python literal's repr as JSON text where that is exact (no `"` or `\\` in it:
    every string is '…' with nothing to unescape; None/True/False only outside strings),
    else None. What JSON cannot say (tuples, sets, non-string keys, inf) fails to parse
    and goes to `ast` — the answer is ast.literal_eval's either way, 3.5× cheaper."""
    if '"' in text or "\\" in text:
        return None
    out, last = [], 0
    for m in _STRING.finditer(text):
        out += [_words(text[last : m.start()]), '"', m.group()[1:-1], '"']
        last = m.end()
    out.append(_words(text[last:]))
    code = out[::4]  # the parts outside strings
    if any(_BIG.search(c) for c in code):  # orjson would read a 64-bit+ integer as a float
        return None
    return "".join(out)


def _no(name: str) -> None:
    raise json.JSONDecodeError(f"{name} is no JSON", name, 0)  # as orjson refuses it


def _words(code: str) -> str:
    return code.replace("None", "null").replace("True", "true").replace("False", "false")


def read(text: str) -> dict:
    """A meta_info span as a dict: JSON first, else a Python literal (never evaluated)."""
    try:
        # orjson reads an integer past 64 bits as a float: such a text, by the exact reader
        v = (
            orjson.loads(text)
            if _BIG.search(text) is None
            else json.loads(text, parse_constant=_no)
        )
    except json.JSONDecodeError:  # orjson's is one too
        v = None
        quick = as_json(text)
        if quick is not None:
            try:
                v = orjson.loads(quick)
            except orjson.JSONDecodeError:
                v = None
        if v is None:
            v = ast.literal_eval(text)  # literals only: no names, calls or operators
    if not isinstance(v, dict):
        raise ValueError("meta_info is not a mapping")
    return v


def row(line: str | None, whole: bool = False) -> dict:
    """request_meta's columns from one line (all None where it holds no meta_info)."""
    out: dict = dict.fromkeys(COLUMNS)
    if not line:
        return out
    text = (line if len(line) <= MAX_LINE else None) if whole else span(line)
    if text is None:
        if whole:
            out["extra"] = '{"note":"record over 16 MB: not read"}'
        elif _START.search(line):
            out["extra"] = '{"note":"meta_info unbalanced or over 64 KB: not read"}'
        return out
    try:
        meta = read(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        note = f"meta_info not a literal: {type(exc).__name__}"
        out["extra"] = orjson.dumps({"note": note}).decode()
        return out
    return _columns(meta, whole, out)


def _columns(meta: dict, whole: bool, out: dict) -> dict:
    """`out` (request_meta's columns, all None) filled from a meta_info mapping."""
    if whole:
        meta.pop("request_parameters", None)
    rest = {}
    for k, v in meta.items():
        col = KEYS.get(k)
        if k == "finish_reason" and isinstance(v, dict):
            out["finish_type"] = _text(v.get("type"))
            out["finish_message"] = _text(v.get("message"))
            out["status_code"] = _text(v.get("status_code"))
            told = ("type", "message", "status_code")
            rest.update(
                {f"finish_reason.{kk}": vv for kk, vv in v.items() if kk not in told and vv}
            )
        elif k == "finish_reason" and v is not None:
            out["finish_type"] = _text(v)
        elif col is not None:
            out[col] = _text(v)
        else:
            rest[str(k)] = v
    if rest:
        try:
            out["extra"] = orjson.dumps(rest, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
        except TypeError:  # an integer past 64 bits (orjson has none), a key JSON has not
            out["extra"] = _plain_json(rest)
    return out


def _plain_json(rest: dict) -> str:
    try:
        return json.dumps({str(k): v for k, v in rest.items()}, default=str)
    except (TypeError, ValueError):
        return json.dumps({"note": "meta_info values not JSON", "repr": repr(rest)[:4096]})


def _text(v: object) -> str | None:
    return None if v is None else str(v)


# The common repr, cut and turned into JSON for the whole column at once: a `'meta_info':
# {…}` span of at most two levels of braces whose strings are '…' holding no quote,
# backslash, brace or None/True/False (so the quote swap and the words' swap are exact),
# in a line that names meta_info once (so the span is the one the brace walk finds), with
# no integer of 19 digits or more (orjson reads one below -2^63 as a float). Any other
# line is read row by row, as before.
_STR = r"'[^'\"\\\n{}]*'"
_FLAT = rf"(?:[^{{}}'\"\\\n]|{_STR})*"
_FAST = rf"'meta_info': \{{(?:{_FLAT}|\{{{_FLAT}\}})*\}}"
_FAST_PREFIX = len("'meta_info': ")
_WORDS = r"None|True|False"


def _fast_json(lines: pl.Series) -> pl.Series:
    """Each line's meta_info span as JSON text where the fast form applies, else null."""
    # The span cut once, a column: an eager select ran the regex for each use of it. Cut
    # by a match without groups and its known prefix sliced off: the same span (a match
    # is where it is with or without groups), found by the DFA alone (the capture engine
    # took 3× as long). The strings are searched for words only in the spans holding one.
    line = lines.cast(pl.String)
    cut = line.str.extract_all(_FAST).list.first().str.slice(_FAST_PREFIX)
    frame = pl.DataFrame({"line": line, "cut": cut, "words": cut.str.contains(_WORDS)})
    cut_ = pl.col("cut")
    words_in_strings = (
        pl.when("words")
        .then(cut_.str.extract_all(_STR).list.eval(pl.element().str.contains(_WORDS)).list.any())
        .otherwise(False)
    )
    ok = (
        (pl.col("line").str.count_matches("meta_info", literal=True) == 1)
        & ~words_in_strings
        & ~cut_.str.contains(r"\d{19}")
        & (cut_.str.len_chars() <= MAX_SPAN)  # past it the row reader says so in a note
    )
    text = cut_.str.replace_all("'", '"', literal=True)
    words = (
        text.str.replace_all(r"\bNone\b", "null")
        .str.replace_all(r"\bTrue\b", "true")
        .str.replace_all(r"\bFalse\b", "false")
    )
    return frame.select(
        pl.when(ok).then(pl.when("words").then(words).otherwise(text)).alias("json")
    ).to_series()


def meta_columns(lines: pl.Series, whole: bool = False) -> pl.DataFrame:
    """request_meta's columns for each line (text; cast by the table's declaration).
    The common repr's span is cut and made JSON for the column at once (_FAST); the rest
    row by row: a span in general needs a parser."""
    texts = lines.to_list()
    fast = [None] * len(texts) if whole else _fast_json(lines).to_list()
    rows = []
    for x, j in zip(texts, fast, strict=True):
        meta = None
        if j is not None:
            with contextlib.suppress(orjson.JSONDecodeError):
                meta = orjson.loads(j)
        rows.append(_columns(meta, whole, dict.fromkeys(COLUMNS)) if isinstance(meta, dict)
                    else row(x, whole))  # fmt: skip
    return pl.DataFrame(
        {c: [r[c] for r in rows] for c in COLUMNS}, schema=dict.fromkeys(COLUMNS, pl.String)
    )
