"""Every journalctl rendering of one real journal yields the same entries."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from forensics.parsers.formats import read_stream
from forensics.parsers.journald import ReadContext, blocks
from forensics.parsers.journald.text import _blob_placeholders, _utc_microseconds

import forensics

from . import corpus

SECOND_PRECISION = {"short", "short-iso", "short-full", "with-unit"}
US_PRECISION = {"short-iso-precise", "short-precise", "short-unix"}
STRUCTURED = {"json", "json-seq", "export", "journal"}


def _rows(db: Path) -> list[dict]:
    cols, rows = forensics.query_rows("SELECT * FROM entries ORDER BY entry_no", db)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _bytes(row: dict) -> bytes:
    return row["message_raw"] if row["message_raw"] is not None else row["message"].encode()


@pytest.mark.parametrize(
    "fmt", sorted(SECOND_PRECISION | US_PRECISION | STRUCTURED | {"short-monotonic"})
)
def test_rendering_round_trips(renderings: dict[str, Path], db: Path, fmt: str) -> None:
    res = forensics.ingest([str(renderings[fmt])], db)
    assert res.sources[0].format == fmt  # sniffed, not told
    rows = _rows(db)
    want = corpus.expected()
    assert len(rows) == len(want)
    for row, exp in zip(rows, want, strict=True):
        assert _bytes(row) == exp.message
        assert row["host"] == exp.host
        assert row["pid"] == exp.pid
        if fmt == "with-unit":
            assert row["unit"] == exp.unit
        else:
            assert row["ident"] == exp.ident
        if fmt in STRUCTURED:
            assert (row["unit"], row["boot_id"], row["mono_us"]) == (
                exp.unit,
                exp.boot,
                exp.mono_us,
            )
            assert row["cursor"] is not None
        if fmt in STRUCTURED or fmt in US_PRECISION:
            assert row["ts_us"] == exp.ts_us
        elif fmt in SECOND_PRECISION:
            assert row["ts_us"] == exp.ts_us // 1_000_000 * 1_000_000
        else:  # short-monotonic: no wall clock
            assert row["ts_us"] is None
            assert row["mono_us"] == exp.mono_us
        assert row["invalid_utf8"] == (b"\xff" in exp.message)
        assert not row["truncated"]
    assert sum(r["parts"] > 1 for r in rows) == 1  # the LineMax split, rejoined
    # journalctl marks the boot change in text renderings; entries after it know their boot.
    assert rows[-4]["boot_id"] == corpus.BOOT_B


def test_structured_renderings_agree_on_cursors(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    cursors = []
    for fmt in ("json", "json-seq", "export", "journal"):
        db = tmp_path / f"{fmt}.duckdb"
        forensics.ingest([str(renderings[fmt])], db)
        cursors.append([r["cursor"] for r in _rows(db)])
    assert all(c == cursors[0] for c in cursors)


def test_cat_keeps_every_line_and_takes_sglang_times(renderings: dict[str, Path], db: Path) -> None:
    res = forensics.ingest([str(renderings["cat"])], db, host="decode-0")
    rows = _rows(db)
    text = b"\n".join(_bytes(r) for r in rows)
    assert text == b"\n".join(e.message for e in corpus.expected())
    assert rows[0]["ts_us"] == corpus.T0  # from the "[2026-11-29 07:00:00 TP0]" prefix
    # the lines after it state no time: each takes the one before it, and says so
    _, inherited = forensics.query_rows(
        "SELECT ts_us, ts_inherited FROM entries ORDER BY entry_no", db
    )
    assert inherited[0] == (corpus.T0, False)
    assert all(r == (corpus.T0, True) for r in inherited[1:])
    assert {r["host"] for r in rows} == {"decode-0"}
    assert any("SGLang" in n for n in res.sources[0].notes)


def test_year_inferred_from_sglang_prefix(renderings: dict[str, Path], db: Path) -> None:
    res = forensics.ingest([str(renderings["short-precise"])], db)
    assert any("year 2026" in n and "SGLang" in n for n in res.sources[0].notes)


def test_year_from_option_wins(renderings: dict[str, Path], db: Path) -> None:
    forensics.ingest([str(renderings["short"])], db, year=2024)
    rows = _rows(db)
    assert rows[0]["ts_us"] // 1_000_000 == 1_732_863_600  # 2024-11-29 07:00:00 UTC


def test_json_without_all_flags_truncated_values(renderings: dict[str, Path], db: Path) -> None:
    forensics.ingest([str(renderings["json-noall"])], db)
    rows = _rows(db)
    long = [r for r in rows if r["truncated"]]
    # journalctl without --all nulls values over 4096 bytes: the entry stays, flagged.
    assert [r["message"] for r in long] == [None, "tail of the split line"]
    assert long[1]["parts"] == 2  # still rejoined: the part we have, flagged truncated
    assert len(rows) == len(corpus.expected())


def test_text_without_all_flags_blob_placeholders(renderings: dict[str, Path], db: Path) -> None:
    forensics.ingest([str(renderings["short-noall"])], db)
    rows = _rows(db)
    blob = [r for r in rows if r["truncated"]]
    assert len(blob) == 1 and blob[0]["message"].endswith("blob data]")


def test_only_a_whole_placeholder_is_a_blob() -> None:
    msg = pl.Series(["[12B blob data]", "a [12B blob data]", "[1.5MB blob data]", "plain", None])
    assert _blob_placeholders(msg).to_list() == [True, False, True, False, False]
    assert _blob_placeholders(pl.Series(["plain", None])).to_list() == [False, False]


@pytest.mark.parametrize("fmt", corpus.TEXT_RENDERINGS)
def test_text_line_numbers_do_not_depend_on_where_blocks_are_cut(
    renderings: dict[str, Path], monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Blocks number their lines from 1 and the reader adds the lines before, in order:
    cut into blocks of a line or two, a rendering (journalctl's, with a boot marker, a
    continued message, invalid UTF-8 and a LineMax split) plus a stray line and a CRLF
    line yields the same entries, line numbers, quarantine and line count as in one block."""
    data = renderings[fmt].read_bytes()
    data += b"a stray line that is no entry\n" + data.splitlines(keepends=True)[0][:-1] + b"\r\n"

    def read() -> tuple[list[dict], list[tuple[int, str]], int, int]:
        ctx = ReadContext(name=fmt, year=2026)
        rows = pa.concat_tables(read_stream(io.BytesIO(data), fmt, ctx)).to_pylist()
        return rows, [(q.line, q.reason) for q in ctx.quarantine], ctx.lines, ctx.markers

    whole = read()
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 64)
    cut = read()
    assert cut == whole
    rows, quarantine, lines, _ = whole
    assert lines == data.count(b"\n")
    assert rows[-1]["line_first"] == rows[-1]["line_last"] == lines  # the CRLF line, last
    if fmt != "cat":  # cat takes any line as a message
        assert quarantine == [(lines - 1, f"not a {fmt} line")]


@pytest.mark.parametrize("tail", [b"last line\n", b"last line without its newline"])
def test_blocks_hold_every_byte_once_and_cut_before_an_entry(
    monkeypatch: pytest.MonkeyPatch, tail: bytes
) -> None:
    """Blocks read into their own buffers after the carried bytes: together they are the
    input (plus a newline after a last line without one), each ends in a newline and
    starts an entry, except where a record outgrew MAX_CARRY_BYTES and was cut at a line."""

    monkeypatch.setattr(blocks, "BLOCK_BYTES", 8)
    monkeypatch.setattr(blocks, "MAX_CARRY_BYTES", 40)
    data = (
        b"entry one\n  continued\n  more\n"
        + b"entry two " + b"x" * 30 + b"\n"  # longer than a block: read on
        + b"entry three\n" + b"  indented line\n" * 4  # one record over MAX_CARRY_BYTES
        + tail
    )  # fmt: skip
    got = list(blocks.blocks(io.BytesIO(data), blocks.line_start_cut(True)))
    assert b"".join(got) == (data if data.endswith(b"\n") else data + b"\n")
    assert all(b.endswith(b"\n") for b in got)
    starts = [b[:1] for b in got]
    assert starts[:3] == [b"e", b"e", b"e"]  # entry one, two, three: whole
    assert b" " in starts  # the record over MAX_CARRY_BYTES, cut at a line inside it


def test_utc_times_by_their_digits_equal_the_format_or_step_aside() -> None:
    """short-iso-precise times as journalctl prints them (TZ=UTC) are read by their digits;
    every one equals what the format gives, and a column with any other form or an
    impossible time is left to the format (None)."""
    fmt = "%Y-%m-%dT%H:%M:%S%.f%z"
    base = dt.datetime(2024, 2, 28, 23, 59, 59, 999_999, tzinfo=dt.UTC)
    times = [base + dt.timedelta(microseconds=k * 7_919_113) for k in range(2_000)]
    times += [dt.datetime(1970, 1, 1, tzinfo=dt.UTC), dt.datetime(9999, 12, 31, 23, 59, 59,
                                                                   999_999, tzinfo=dt.UTC)]  # fmt: skip
    ts = pl.Series("ts", [t.strftime("%Y-%m-%dT%H:%M:%S.%f+0000") for t in times] + [None])
    want = ts.str.to_datetime(fmt, strict=False).dt.epoch("us")
    got = _utc_microseconds(ts)
    assert got is not None and got.to_list() == want.to_list()
    assert got[-2] == 253_402_300_799_999_999 and got[-1] is None
    # not journalctl's form, or no time: the format decides (null for February 30th)
    assert _utc_microseconds(pl.Series(["2026-02-30T07:00:00.000000+0000"])).to_list() == [None]
    for odd in ("2026-11-29T07:00:00.000000+0100", "2026-11-29T07:00:00.000000Z",
                "2026-11-29T07:00:00.000000+00:00", "2026-11-29T24:00:00.000000+0000",
                "2026-11-29T07:00:60.000000+0000", "2026-11-29T07:00:00.0000001+000"):  # fmt: skip
        assert _utc_microseconds(pl.Series([odd, "2026-11-29T07:00:00.000000+0000"])) is None
