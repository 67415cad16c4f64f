"""meta_info read fast (a repr as JSON where that is exact) is what ast.literal_eval
reads: the same values and types on any literal, and the real Finish lines."""

from __future__ import annotations

import ast

from forensics.parsers.patterns.meta_info import as_json, read, span
from hypothesis import given, settings
from hypothesis import strategies as st

from .test_real_lines import real_lines

TEXT = st.text(alphabet=st.sampled_from(list("ab 'N\\one\"True:,{}[]()\n-1")), max_size=12)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(meta=st.dictionaries(TEXT | st.integers(0, 9), VALUES, max_size=6))
def test_fast_read_is_literal_eval(meta: dict) -> None:
    text = repr(meta)
    assert repr(read(text)) == repr(ast.literal_eval(text))


def test_real_finish_lines_take_the_fast_way_and_agree() -> None:
    spans = [s for _, _, line in real_lines() if (s := span(line)) is not None]
    assert len(spans) >= 2
    for s in spans:
        assert repr(read(s)) == repr(ast.literal_eval(s))
    assert any(as_json(s) is not None for s in spans)  # the fast way was taken


@settings(max_examples=300, deadline=None)
@given(metas=st.lists(st.dictionaries(TEXT | st.integers(0, 9), VALUES, max_size=6),
                      min_size=1, max_size=8))  # fmt: skip
def test_the_column_at_once_is_row_by_row(metas: list[dict]) -> None:
    """meta_columns' fast form (the span cut and made JSON for the column at once) gives
    what reading each line alone gives, on any literal in a Finish line."""
    import polars as pl
    from forensics.parsers.patterns.meta_info import meta_columns, row

    lines = [f"[2026-09-20 14:03:14] Finish: obj=GenerateReqInput(rid='r{i}'), out={{'text': "
             f"'…' ... , 'meta_info': {m!r}}}" for i, m in enumerate(metas)]  # fmt: skip
    got = meta_columns(pl.Series(lines)).to_dicts()
    assert got == [row(x) for x in lines]


def test_the_common_finish_line_takes_the_column_at_once() -> None:
    import polars as pl
    from forensics.parsers.patterns.meta_info import _fast_json

    spans = [line for _, _, line in real_lines() if span(line) is not None]
    fast = _fast_json(pl.Series(spans)).to_list()
    assert any(f is not None for f in fast)
    planted = ("[2026-09-20 14:03:14] Finish: obj=GenerateReqInput(rid='x'), out={'meta_info': "
               "{'id': 'x', 'finish_reason': {'type': 'abort', 'message': 'None left'}, "
               "'prompt_tokens': 12, 'x': None}}")  # fmt: skip
    assert _fast_json(pl.Series([planted])).to_list() == [None]  # a word in a string: by row
    from forensics.parsers.patterns.meta_info import MAX_SPAN, meta_columns, row

    huge = f"Finish: out={{'meta_info': {{'id': 'x', 'x': '{'a' * MAX_SPAN}'}}}}"  # past the cap
    assert meta_columns(pl.Series([huge])).to_dicts() == [row(huge)]
    assert "over 64 KB" in row(huge)["extra"]


def test_values_json_cannot_say_are_kept_as_text() -> None:
    """An integer past 64 bits and a tuple key (reprs orjson refuses) cost no line."""
    from forensics.parsers.patterns.meta_info import row

    got = row("x 'meta_info': {'id': 'r', 'big': 10000000000000000000000, 't': {(1, 2): 3}}")
    assert got["rid"] == "r" and "10000000000000000000000" in got["extra"]
    low = repr({"a": -9223372036854775809, "b": 18446744073709551616})  # past int64, uint64
    assert repr(read(low)) == repr(ast.literal_eval(low))  # exact, not a float
