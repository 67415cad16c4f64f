"""Harness results files: JSON lines and CSV, sniffed, checked, quarantined when broken."""

from __future__ import annotations

from pathlib import Path

from forensics.parsers.results import sniff_results

import forensics


def test_sniff() -> None:
    assert sniff_results(b'{"session": 1, "rid": "a", "corrupted": true}\n') == "results-jsonl"
    assert sniff_results(b"session,round,rid,corrupted\n") == "results-csv"
    assert sniff_results(b'{"MESSAGE": "x", "rid": "a", "session": 1}\n') is None
    assert sniff_results(b"2026-11-29T07:00:01+0000 h a[1]: x\n") is None


def test_jsonl_times_rooms_and_extra(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text(
        '{"session": 3, "round": 1, "rid": "a", "room": 7, "corrupted": true, "reason": "leak",'
        ' "start": 1795935600.5, "end": "2026-11-29T07:00:01.25Z", "concurrency": 64, "model": "x"}\n'
    )
    res = forensics.ingest([str(f)], db, run="flag-on")
    assert res.sources[0].format == "results-jsonl" and res.sources[0].records == {"result": 1}
    cols, rows = forensics.query_rows("SELECT * FROM results", db)
    row = dict(zip(cols, rows[0], strict=True))
    assert (row["run"], row["session"], row["round"], row["room"], row["corrupted"]) == (
        "flag-on",
        "3",
        1,
        7,
        True,
    )
    assert (row["start_us"], row["end_us"]) == (1_795_935_600_500_000, 1_795_935_601_250_000)
    assert row["extra"] == '{"model":"x"}'


def test_broken_rows_quarantined_with_reason(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "r.csv"
    f.write_text(
        "session,rid,ok,start\n"
        "s,a,true,2026-11-29T07:00:00\n"
        "s,,true,\n"
        "s,b,maybe,\n"
        "s,c,false,yesterday\n"
    )
    res = forensics.ingest([str(f)], db)
    assert res.sources[0].records == {"result": 1}
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine ORDER BY line", db)
    assert q == [
        (3, "results: no rid"),
        (4, "results: ok is not true/false: 'maybe'"),
        (5, "results: start is neither epoch seconds nor ISO 8601: 'yesterday'"),
    ]
