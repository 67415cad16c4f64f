"""Property tests: export and json readers round-trip arbitrary names and bytes."""

from __future__ import annotations

import io

import orjson
import pyarrow as pa
from forensics.parsers.journald import ReadContext
from forensics.parsers.journald.export import read_export
from forensics.parsers.journald.jsonfmt import read_json
from forensics.parsers.journald.schema import FIELD_MAP
from hypothesis import example, given, settings
from hypothesis import strategies as st

from forensics.synthetic.journal_writer import export_entry

names = st.from_regex(r"[A-Z][A-Z0-9_]{0,24}", fullmatch=True).filter(lambda n: n not in FIELD_MAP)
values = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=100).map(str.encode),
    st.lists(
        st.sampled_from([b"\n", b"\n\n", b"=", b"\x00", b"\xff", b"a", b" "]), max_size=30
    ).map(b"".join),
)
entry = st.tuples(values, st.dictionaries(names, values, max_size=6))


def _extra(raw: bytes):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def _read(reader, data: bytes) -> list[dict]:
    ctx = ReadContext(name="prop")
    tables = list(reader(io.BufferedReader(io.BytesIO(data)), ctx))
    assert not ctx.quarantine
    return pa.concat_tables(tables).to_pylist() if tables else []


def _check(rows: list[dict], entries) -> None:
    assert len(rows) == len(entries)
    for row, (msg, extra) in zip(rows, entries, strict=True):
        got = row["message_raw"] if row["message_raw"] is not None else row["message"].encode()
        assert got == msg
        fields = orjson.loads(row["fields"]) if row["fields"] else {}
        assert fields == {k: _extra(v) for k, v in extra.items()}


@settings(max_examples=150, deadline=None)
@given(st.lists(entry, min_size=1, max_size=8))
def test_export_round_trip(entries) -> None:
    data = b"".join(
        export_entry([("__CURSOR", f"c{i}"), ("MESSAGE", m), *x.items()])
        for i, (m, x) in enumerate(entries)
    )
    rows = _read(read_export, data)
    _check(rows, entries)
    assert [r["cursor"] for r in rows] == [f"c{i}" for i in range(len(entries))]


def _json_value(raw: bytes):
    # journalctl -o json: text as a string, anything else as an array of byte values.
    try:
        text = raw.decode("utf-8")
        if all(c >= " " or c in "\t\n" for c in text):
            return text
    except UnicodeDecodeError:
        pass
    return list(raw)


@settings(max_examples=150, deadline=None)
@given(st.lists(entry, min_size=1, max_size=8), st.booleans())
def test_json_round_trip(entries, seq: bool) -> None:
    lines = []
    for m, x in entries:
        obj = {"MESSAGE": _json_value(m), **{k: _json_value(v) for k, v in x.items()}}
        lines.append((b"\x1e" if seq else b"") + orjson.dumps(obj) + b"\n")
    _check(_read(read_json, b"".join(lines)), entries)


def test_export_multi_valued_field_kept_as_list() -> None:
    data = export_entry([("MESSAGE", "m"), ("FOO", "1"), ("FOO", b"\xff")])
    rows = _read(read_export, data)
    assert orjson.loads(rows[0]["fields"]) == {"FOO": ["1", [255]]}


def test_export_stream_cut_inside_a_binary_value_is_quarantined() -> None:
    data = export_entry([("MESSAGE", "ok")]) + export_entry([("MESSAGE", b"\x00" * 50)])[:-30]
    ctx = ReadContext(name="cut")
    rows = pa.concat_tables(list(read_export(io.BufferedReader(io.BytesIO(data)), ctx))).to_pylist()
    assert [r["message"] for r in rows] == ["ok"]
    assert [q.reason for q in ctx.quarantine] == ["export: stream ends inside an entry"]


_HEADER_PARTS = st.text(
    alphabet=st.sampled_from(list("ab1 :[]-._é٣\u00a0\tß09Z+")),
    max_size=12,
)
_STAMPS = {
    "short-iso-precise": st.sampled_from(["2026-11-29T07:00:00.000104+0000", "2026-11-29T07:00:00.1Z",
                                          "2026-11-29T07:00:0٣.000104+0000"]),
    "short-iso": st.sampled_from(["2026-11-29T07:00:00+0000", "٢026-11-29T07:00:00+0000"]),
    "short-full": st.sampled_from(["Sun 2026-11-29 07:00:00 UTC", "Sun 2026-11-29 07:00:00.5 CÉT"]),
    "short-precise": st.sampled_from(["Nov 29 07:00:00.000104", "Nov  9 07:00:00.1"]),
    "short-unix": st.sampled_from(["1764399600.000104", "17643996٠0.1"]),
}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(_STAMPS)).flatmap(lambda f: st.tuples(st.just(f), _STAMPS[f])),
    _HEADER_PARTS, _HEADER_PARTS, st.one_of(st.none(), _HEADER_PARTS), _HEADER_PARTS,
)  # fmt: skip
@example(("short-iso-precise", "2026-11-29T07:00:00.000104+0000"), "h", "a", None, "b: c")
@example(("short-iso-precise", "2026-11-29T07:00:00.000104+0000"), "h", "a:b", "1", "m")
@example(("short-iso-precise", "2026-11-29T07:00:00.000104+0000"), "hé", "a", "1", "m")
@example(("short-iso-precise", "2026-11-29T07:00:00.000104+0000"), "h", "a", "٣", "m")
@example(("short-iso", "٢026-11-29T07:00:00+0000"), "h", "a", "1", "m")
@example(("short-iso-precise", "2026-11-29T07:00:00.000104+0000"), "h", "a[1]", "2", "m")
def test_fast_header_form_reads_what_the_general_one_does(stamp, host, ident, pid, rest) -> None:
    """The header's fast form (ASCII digits and hosts, no ":" or "[" in identifiers) and
    its fallback read every line as the general form alone does."""
    import polars as pl
    from forensics.parsers.journald.text import TEXT_FORMATS, TextReader, header_regex

    fmt, ts = stamp
    line = f"{ts} {host} {ident}{'' if pid is None else f'[{pid}]'}: {rest}\n"
    lines = pl.Series("line", [line, "2026-11-29T07:00:00.000104+0000 h i[1]: m\n"])
    reader = TextReader(TEXT_FORMATS[fmt], ReadContext(name="prop"))
    general = lines.str.extract_groups(header_regex(TEXT_FORMATS[fmt])).struct.unnest()
    assert reader._headers(lines).equals(general)
