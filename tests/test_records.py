"""The forensic record contract (docs/log-contract.md): parsing, validation, storage."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest
from forensics.parsers.records import parse_records
from forensics.parsers.records.contract import _pages_column, _pages_like, _pages_of

import forensics
from forensics.synthetic.incident import generate

from .helpers import plain


def _frame(messages: list[str], fields: list[str | None] | None = None) -> pl.DataFrame:
    return pl.DataFrame(
        {"message": messages, "fields": fields or [None] * len(messages)},
        schema={"message": pl.String, "fields": pl.String},
    )


def _parse(*messages: str, fields: list[str | None] | None = None):
    return parse_records(_frame(list(messages), fields))


def test_checksum_key_values_with_prefix_quotes_and_unknown_keys() -> None:
    r = _parse(
        "[2026-11-29 07:00:01 DP0 TP0] forensics:checksum side=src room=7301934425522180813 "
        "rid=9b1f buf=kv layer=all tp=3 dtype=fp8 nbytes=4096 head=aa tail=bb full=cc "
        'note="retry \\"2\\" = late" weird'
    )
    row = r.checksum.to_dicts()[0]
    assert (row["side"], row["room"], row["rid"], row["buf"], row["layer"]) == (
        "src",
        7301934425522180813,
        "9b1f",
        "kv",
        "all",
    )
    assert (row["tp"], row["nbytes"], row["head"], row["tail"], row["full"]) == (
        3,
        4096,
        "aa",
        "bb",
        "cc",
    )
    assert orjson.loads(row["extra"]) == {"note": 'retry "2" = late', "_unparsed": "weird"}
    assert r.rejects == []


@pytest.mark.parametrize("prefix", ["[ü] ", "[€€] ", "✓ ", "[节点-0 TP0] ", "🔥"])
@pytest.mark.parametrize("canonical", [True, False])
def test_letters_of_several_bytes_before_the_token_leave_the_body_whole(
    prefix: str, canonical: bool
) -> None:
    # The token was found by its byte offset and the body cut at that many characters:
    # a logger's prefix with such letters cut the body's first key short (every record
    # of the line rejected).
    bodies = [
        "forensics:step step=4 bs=2 rids=a,é rooms=1,2",
        "forensics:checksum side=src room=5 rid=r buf=kv head=a tail=b full=c",
        'forensics:checksum {"side": "dst", "room": 6, "full": "ff"}',
    ]
    plain = parse_records(_frame(bodies), canonical=canonical)
    wide = parse_records(_frame([prefix + b for b in bodies]), canonical=canonical)
    assert wide.rejects == plain.rejects == []
    assert wide.step.equals(plain.step) and wide.checksum.equals(plain.checksum)
    assert wide.step["rids"].to_list() == ["a,é"] and wide.checksum["room"].to_list() == [5, 6]


def test_checksum_defaults_and_json_form() -> None:
    r = _parse('forensics:checksum {"side": "dst", "room": 5, "full": "ff", "attempt": 2}')
    row = r.checksum.to_dicts()[0]
    assert (row["side"], row["room"], row["buf"], row["full"]) == ("dst", 5, "index_k", "ff")
    assert orjson.loads(row["extra"]) == {"attempt": "2"}


def test_extra_is_given_to_the_odd_records_of_a_group_only() -> None:
    canary = "forensics:canary step={} layer=0 bs=2 mode=replay expected=[0-1] changed=[0-1]"
    msgs = [canary.format(i) for i in range(200)]
    msgs[7] += " stray"
    msgs[50] += " attempt=3"
    msgs.append("forensics:step step=1 bs=1 rids=a rooms=5 retry=yes")
    r = _parse(*msgs)
    extra = dict(zip(r.canary["step"].to_list(), r.canary["extra"].to_list(), strict=True))
    assert len(extra) == 200
    assert orjson.loads(extra.pop(7)) == {"_unparsed": "stray"}
    assert orjson.loads(extra.pop(50)) == {"attempt": "3"}
    assert set(extra.values()) == {None}
    assert [orjson.loads(x) for x in r.step["extra"]] == [{"retry": "yes"}]
    assert r.rejects == []


NOT_ROOM = "checksum: room is not an unsigned 63-bit number"


BAD_PAGES = "canary: bad page list (not page ids and ranges, or over 1,048,576 pages)"


@pytest.mark.parametrize(
    "message,reason",
    [
        ("forensics:checksum side=src head=aa", "checksum: no room"),
        ("forensics:checksum side=src room=abc head=aa", NOT_ROOM),
        (f"forensics:checksum side=src room={1 << 63} head=aa", NOT_ROOM),
        ("forensics:checksum side=up room=1 head=aa", "checksum: side must be src or dst"),
        ("forensics:checksum side=src room=1", "checksum: no head, tail or full digest"),
        ("forensics:canary layer=3 changed=1", "canary: no step (or not a number)"),
        ("forensics:canary step=x layer=3", "canary: no step (or not a number)"),
        ("forensics:canary step=1", "canary: no layer (or not a number)"),
        ("forensics:canary step=1 layer=2 changed=9-3", BAD_PAGES),
        ("forensics:canary step=1 layer=2 changed=1-100000000", BAD_PAGES),
        ("forensics:canary step=1 layer=2 changed=1-99999999999999999999", BAD_PAGES),
        ("forensics:canary step=1 layer=2 changed=0-600000,700000-1300000", BAD_PAGES),
        ("forensics:step bs=2", "step: no step (or not a number)"),
        ("forensics:step step=1 rooms=1,x", "step: rooms must be numbers"),
        ("forensics:checksum {not json", "checksum: JSON body does not parse"),
        ("forensics:bogus a=1", "unknown record kind 'bogus'"),
    ],
)
def test_broken_records_are_rejected_with_reason(message: str, reason: str) -> None:
    r = _parse(message)
    assert r.rejects == [(0, reason)]
    assert r.checksum.is_empty() and r.canary.is_empty() and r.step.is_empty()


def test_canary_lists_counts_ranges_and_derived_unexpected() -> None:
    r = _parse(
        "forensics:canary step=5 layer=30 bs=48 mode=replay expected=[14,15] changed=14,15,300-302",
        "forensics:canary step=6 layer=0 expected=2 changed=32",
        "forensics:canary step=7 layer=0 expected=- changed=[] unexpected=[9]",
    )
    rows = r.canary.sort("step").to_dicts()
    assert rows[0]["unexpected"] == [300, 301, 302] and rows[0]["n_unexpected"] == 3
    assert (rows[0]["n_expected"], rows[0]["n_changed"], rows[0]["mode"]) == (2, 5, "replay")
    assert (rows[1]["changed"], rows[1]["n_changed"], rows[1]["n_expected"]) == (None, 32, 2)
    assert rows[1]["unexpected"] is None  # counts only: nothing to subtract
    assert (rows[2]["expected"], rows[2]["changed"], rows[2]["unexpected"]) == ([], [], [9])


def test_derived_unexpected_where_the_lists_read_the_same_and_where_they_differ() -> None:
    # Same text on both sides takes a shortcut to "nothing outside"; it must agree with
    # the set difference that the other rows (same pages written differently among them)
    # still take, in one group.
    r = _parse(
        "forensics:canary step=1 layer=0 expected=14-15 changed=14-15",
        "forensics:canary step=2 layer=0 expected=14-15 changed=14-16",
        "forensics:canary step=3 layer=0 expected=[14,15] changed=14-15",
        "forensics:canary step=4 layer=0 expected=[] changed=[]",
        "forensics:canary step=5 layer=0 expected=3,1 changed=9,1,3,2",
        "forensics:canary step=6 layer=0 expected=1-2 changed=1-2 unexpected=[7]",
    )
    got = [(row["unexpected"], row["n_unexpected"]) for row in r.canary.sort("step").to_dicts()]
    assert got == [([], 0), ([16], 1), ([], 0), ([], 0), ([2, 9], 2), ([7], 1)]
    assert r.rejects == []


def test_pages_rule() -> None:
    r = _parse(*(f"forensics:canary step={i} layer=0 changed={v}" for i, v in
                 enumerate(["32", "[32]", "1,3-5", "-", "4,x", '"7, 8"'])))  # fmt: skip
    got = [(row["changed"], row["n_changed"]) for row in r.canary.sort("step").to_dicts()]
    assert got[0] == (None, 32)
    assert got[1] == ([32], 1)
    assert got[2] == ([1, 3, 4, 5], 4)
    assert got[3] == ([], 0)
    assert got[4] == ([7, 8], 2)  # spaces take the general path, next to a bad list
    assert r.rejects == [(4, BAD_PAGES)]


def test_step_lists_and_structured_fields() -> None:
    fields = orjson.dumps(
        {"FORENSICS_KIND": "step", "FORENSICS_STEP": "9", "FORENSICS_ROOMS": "7,8"}
    ).decode()
    r = _parse(
        "forensics:step step=3 bs=2 rids=a,b rooms=1,2", "plain message", fields=[None, fields]
    )
    rows = r.step.sort("step").to_dicts()
    assert (rows[0]["rids"], rows[0]["rooms"]) == ("a,b", "1,2")  # stored as text
    assert (rows[1]["step"], rows[1]["rooms"]) == (9, "7,8")


def test_demo_incident_records_stored_with_origin(tmp_path: Path) -> None:
    res = forensics.demo(tmp_path / "inc")
    truth = generate().truth
    db = res.ingest.db
    n_rooms = len(truth["verdicts"])
    missing = sum(v == "missing_dst" for v in truth["verdicts"].values())
    no_src = sum(v == "missing_src" for v in truth["verdicts"].values())
    dst_records = sum(truth["dst_count"].values())  # duplicates and the conflict included
    _, rows = forensics.query_rows(
        "SELECT side, count(*), count(DISTINCT room), bool_and(run = 'demo' AND host IS NOT NULL"
        " AND ts_us IS NOT NULL) FROM checksums GROUP BY side ORDER BY side",
        db,
    )
    assert rows == [
        ("dst", dst_records, n_rooms - missing, True),
        ("src", n_rooms - no_src, n_rooms - no_src, True),
    ]
    _, burst = forensics.query_rows(
        "SELECT DISTINCT step FROM canary WHERE n_unexpected > 0 ORDER BY step", db
    )
    assert [b[0] for b in burst] == truth["burst_steps"]
    _, q = forensics.query_rows("SELECT count(*) FROM quarantine", db)
    assert q == [(0,)]


def test_rejected_records_reach_quarantine_and_entries_stay(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "d.log"
    f.write_text(
        "2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: forensics:checksum side=dst head=a\n"
        "2026-11-29T07:00:01.000002+0000 decode-0 python3[1]: forensics:step step=4 rids=r1\n"
    )
    res = forensics.ingest([str(f)], db)
    assert {k: n for k, n in res.sources[0].records.items() if n} == {"step": 1}
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine", db)
    assert q == [(1, "checksum: no room")]
    _, n = forensics.query_rows("SELECT count(*) FROM entries", db)
    assert n == [(2,)]


def test_overlap_duplicates_drop_their_records(renderings, tmp_path: Path, db: Path) -> None:
    lines = [
        f"2026-11-29T07:00:0{i}.000000+0000 decode-0 python3[1]: forensics:step step={i}\n"
        for i in range(6)
    ]
    (tmp_path / "a.log").write_text("".join(lines[:4]))
    (tmp_path / "b.log").write_text("".join(lines[2:]))
    forensics.ingest([str(tmp_path / "a.log")], db)
    forensics.ingest([str(tmp_path / "b.log")], db)
    _, steps = forensics.query_rows("SELECT step FROM steps ORDER BY step", db)
    assert [s[0] for s in steps] == [0, 1, 2, 3, 4, 5]


def test_structured_fields_through_a_real_journal(tmp_path: Path, db: Path) -> None:
    from forensics.synthetic.journal_writer import export_entry, render, write_journal

    src = tmp_path / "s.export"
    src.write_bytes(
        export_entry(
            [
                ("__REALTIME_TIMESTAMP", 1_795_935_600_000_000),
                ("_HOSTNAME", "decode-0"),
                ("MESSAGE", "idx-k checksum (structured)"),
                ("FORENSICS_KIND", "checksum"),
                ("FORENSICS_SIDE", "dst"),
                ("FORENSICS_ROOM", "7301934425522180813"),
                ("FORENSICS_FULL", "ab12"),
                ("FORENSICS_NOTE", "retry"),
            ]
        )
    )
    journals = write_journal(src, tmp_path / "j" / "s.journal")
    for fmt in ("journal", "json", "export"):
        path = journals[0] if fmt == "journal" else render(journals, fmt, tmp_path / f"s.{fmt}")
        one = tmp_path / f"{fmt}.duckdb"
        forensics.ingest([str(path)], one)
        _, rows = forensics.query_rows('SELECT side, room, "full", extra FROM checksums', one)
        assert rows == [("dst", 7301934425522180813, "ab12", '{"note":"retry"}')], fmt


def _stored_records(db: Path) -> dict[str, list[tuple]]:
    from forensics.store import connect_read_only

    con = connect_read_only(db)
    try:
        out = {
            t: con.execute(f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY entry_no").fetchall()
            for t in ("checksums", "canary", "steps", "transfers", "batches", "rid_rooms")
        }
        out["quarantine"] = con.execute(
            "SELECT line, reason FROM quarantine ORDER BY line"
        ).fetchall()
        return out
    finally:
        con.close()


@pytest.mark.parametrize("group_rows", [1, 50, 10_000_000])
def test_records_are_the_same_however_batches_are_grouped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group_rows: int
) -> None:
    """Batches go to the record parser in groups (records.GROUP_ROWS): many small batches,
    one at a time, about 50 rows at once or all at once, give the same rows as one batch does."""
    from forensics.parsers.journald import blocks

    from forensics.store import records
    from forensics.synthetic.incident import write_short_iso_precise

    inc = generate(sessions=4, rounds=3, steps_per_request=2, seed=3, corruption="effect")
    log = write_short_iso_precise(sorted(inc.prefill + inc.decode, key=lambda e: e.ts_us),
                                  tmp_path / "both.log")  # fmt: skip
    with log.open("a") as fh:  # a record that breaks the contract, in the last batch
        fh.write("2026-11-29T08:00:00.000000+0000 decode-0 python3[1]: forensics:canary layer=x\n")
    forensics.ingest([str(log)], tmp_path / "whole.duckdb")
    whole = _stored_records(tmp_path / "whole.duckdb")
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 4096)  # a few dozen lines a batch
    monkeypatch.setattr(records, "GROUP_ROWS", group_rows)
    submitted: list[int] = []
    real = records._batch_records
    monkeypatch.setattr(
        records, "_batch_records", lambda b, u: (submitted.append(b.num_rows), real(b, u))[1]
    )
    forensics.ingest([str(log)], tmp_path / "parts.duckdb")
    assert _stored_records(tmp_path / "parts.duckdb") == whole
    assert whole["canary"] and whole["checksums"] and whole["steps"] and whole["quarantine"]
    con = plain(tmp_path / "whole.duckdb")
    entries = con.execute("SELECT count(*) FROM entries").fetchall()[0][0]
    con.close()
    assert sum(submitted) == entries  # every entry parsed once
    if group_rows == 1:
        assert len(submitted) >= 8  # each batch on its own
    elif group_rows == 50:  # two or three batches a group
        assert all(n >= 50 for n in submitted[:-1]) and 3 <= len(submitted) <= 5
    else:
        assert len(submitted) == 1


def test_page_lists_read_once_per_text_or_taken_from_expected_agree_with_reading_each() -> None:
    """The shortcuts of the canary's page lists — each distinct text read once (joined back
    in order, or repeated when there is one text), `changed` taken from `expected` where it
    reads the same — give what reading every value on its own gives."""
    texts = ["[0-1]", "3,4,9", "[]", "-", "32", "4,x", "1-99999999999", "[7, 8]", None, "5-6"]
    n = 400
    expected = pl.Series([texts[(i // 16) % len(texts)] for i in range(n)], dtype=pl.String)
    changed = pl.Series(
        [expected[i] if i % 7 else texts[(i // 3) % len(texts)] for i in range(n)],
        dtype=pl.String,
    )
    unexpected = pl.Series(["[]"] * n, dtype=pl.String)

    def same(a, b) -> None:
        for x, y in zip(a, b, strict=True):
            assert x.to_list() == y.to_list()

    for col in (expected, changed, unexpected):
        same(_pages_column(col), _pages_of(col))
    for col in (changed, expected, unexpected):
        like = _pages_like(col, (col == expected).fill_null(False), _pages_column(expected))
        same(like, _pages_of(col))
    assert _pages_of(unexpected)[0].to_list() == [[]] * n


def test_the_record_kind_is_tokens_first_name_in_every_message() -> None:
    """The kind read right after the first token (a short anchored match) is what TOKEN's
    unanchored regex gives: a name after a later token where the first has none, letters
    of several bytes before it, a name longer than the slice, nulls, no token at all."""
    import random

    from forensics.parsers.records.contract import TOKEN, _kinds

    rng = random.Random(3)
    heads = ["", "[2026-11-29 07:00:00 TP0] ", "é中 ", "forensics: then ", "forensics:=x ",
             "forensics:", "xforensics:9 "]  # fmt: skip
    names = ["checksum", "canary", "step", "_odd", "A9_b", "x" * 90, "9bad", ""]
    tails = ["", " side=src room=1", "forensics:step step=2", " é"]
    messages = [None, "no token here", "forensics:"]
    for _ in range(2000):
        messages.append(rng.choice(heads) + "forensics:" + rng.choice(names) + rng.choice(tails))
    msg = pl.Series(messages, dtype=pl.String)
    assert _kinds(msg).to_list() == msg.str.extract(TOKEN, 1).to_list()


def test_a_list_column_whose_nulls_span_values_is_rebuilt_before_the_cast() -> None:
    """polars 1.35's left join leaves list nulls over values, which the cast to the stored
    type refused on the lowest dependency set (test_records_are_the_same_however_batches_
    are_grouped failed there): the shard writer rebuilds such a column, and only such a
    one, so that its nulls span nothing."""
    import numpy as np
    import pyarrow as pa

    from forensics.store.shards import _zero_length_nulls

    kv = pa.struct([("key", pa.large_string()), ("value", pa.large_string())])
    values = pa.array([{"key": "a", "value": "1"}, {"key": "b", "value": "2"},
                       {"key": "c", "value": "3"}], kv)  # fmt: skip
    spanning = pa.LargeListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int64()), values,
                                             mask=pa.array([False, True, False]))  # fmt: skip
    fixed = _zero_length_nulls(pa.chunked_array([spanning])).chunk(0)
    assert np.diff(np.asarray(fixed.offsets)).tolist() == [1, 0, 1]
    stored = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    assert fixed.cast(stored).to_pylist() == [[{"key": "a", "value": "1"}], None,
                                              [{"key": "c", "value": "3"}]]  # fmt: skip
    clean = pa.chunked_array([pa.array([[{"key": "a", "value": "1"}], None], pa.large_list(kv))])
    assert _zero_length_nulls(clean) is clean
