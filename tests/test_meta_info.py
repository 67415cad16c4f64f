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
