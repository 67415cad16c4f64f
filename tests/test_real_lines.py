"""SGLang's lines as printed across versions (tests/data/sglang-real-lines.tsv, each with
its origin), read as a plain log and through a real journal in two renderings: every one
lands in its table, and the rest of the file is never lost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from forensics.parsers.tables import PATTERN_TABLES

import forensics
from forensics.synthetic.journal_writer import export_entry, render, write_journal

DATA = Path(__file__).parent / "data" / "sglang-real-lines.tsv"
T0 = 1_789_912_992_000_000  # 2026-09-20 14:03:12 UTC
TABLES = tuple(PATTERN_TABLES)  # every declared table SGLang's lines fill


def real_lines() -> list[tuple[str, str, str]]:
    rows = []
    for raw in DATA.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        table, origin, line = raw.split("\t", 2)
        rows.append((table, origin, line))
    return rows


def test_corpus_is_real_and_broad() -> None:
    rows = real_lines()
    assert len(rows) >= 40
    assert all(origin for _, origin, _ in rows)  # every line says where it comes from
    assert Counter(t for t, _, _ in rows)["batches"] >= 20


def _counts(db: Path) -> dict[str, int]:
    return {t: forensics.query_rows(f"SELECT count(*) FROM {t}", db)[1][0][0] for t in TABLES}


def _expected() -> dict[str, int]:
    # "a+b": a line that lands in two tables (a Finish line: its room and its meta_info)
    c = Counter(t for ts, _, _ in real_lines() for t in ts.split("+"))
    return {t: c[t] for t in TABLES}


def _journal(tmp_path: Path) -> list[Path]:
    stream = b"".join(
        export_entry({
            "__REALTIME_TIMESTAMP": T0 + i * 1000, "__MONOTONIC_TIMESTAMP": 5_000 + i,
            "_BOOT_ID": "c3" * 16, "_HOSTNAME": "decode-0", "_SYSTEMD_UNIT": "sglang.service",
            "SYSLOG_IDENTIFIER": "python3", "_PID": 4242, "MESSAGE": line,
        }) + b"\n"
        for i, (_, _, line) in enumerate(real_lines())
    )  # fmt: skip
    src = tmp_path / "real.export"
    src.write_bytes(stream)
    return write_journal(src, tmp_path / "j" / "real.journal")


@pytest.mark.parametrize("how", ["plain", "short-iso-precise", "json"])
def test_every_real_line_lands_in_its_table(how: str, tmp_path: Path, db: Path) -> None:
    if how == "plain":
        path = tmp_path / "decode-0.log"
        path.write_text("".join(line + "\n" for _, _, line in real_lines()), encoding="utf-8")
    else:
        path = render(_journal(tmp_path), how, tmp_path / f"real.{how}")
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].quarantined == 0
    assert _counts(db) == _expected()
    rooms = forensics.query_rows("SELECT count(*) FROM rid_rooms WHERE rid IS NULL", db)[1][0][0]
    assert rooms == 0
    # Renamed keys keep their column; what the table lacks stays in extra.
    _, rows = forensics.query_rows(
        "SELECT prealloc_req, extra FROM batches WHERE extra LIKE '%fwd_occupancy%91.37%'", db
    )
    assert rows == [(4, '{"est_prefill_tflops_s_per_gpu":"412.08","fwd_occupancy":"91.37%"}')]
    _, v01 = forensics.query_rows(
        "SELECT phase, new_seq, queue_req FROM batches WHERE extra LIKE '%fsm_cache%'", db
    )
    assert v01 == [("Prefill", 1, 0)]
    _, states = forensics.query_rows(
        "SELECT regexp_extract(reason, 'KVPoll\\.(\\w+)', 1) AS s FROM transfers"
        " WHERE reason LIKE '%KVPoll%' ORDER BY s",
        db,
    )
    assert [s for (s,) in states] == ["Bootstrapping", "Transferring", "WaitingForInput"]
    # Stock evidence: durations with their units as numbers, both forms of the header.
    _, stats = forensics.query_rows(
        "SELECT type, room, transfer_ms, prealloc_queue_ms, alloc_wait_ms FROM req_stats"
        " WHERE type = 'decode' ORDER BY transfer_ms",
        db,
    )
    assert stats == [("decode", 6302951133822940417, 31.9, 20.01, 16.01),
                     ("decode", 4, 22297.77, None, 11.5)]  # fmt: skip
    _, kinds = forensics.query_rows("SELECT kind, count(*) FROM events GROUP BY ALL ORDER BY 1", db)
    assert dict(kinds) == {
        "abort": 1, "aux_mismatch": 1, "cuda_error": 1, "graph_capture": 2,
        "lost_connection": 1, "oom_abort": 1, "retract": 3, "room_failed": 1,
        "router_error": 2, "router_retry": 1, "slice_failed": 2, "traceback": 1,
        # issue 33: the transport's and the server's own failure lines
        "metadata_missing": 1, "nccl_error": 1, "rnic_inactive": 1, "sigquit": 2,
        "session_failed": 2, "transfer_throughput": 2, "ucx_error": 2, "transfer_timeout": 2,
        "release_timeout": 2, "bootstrap_error": 2, "connector_failure": 1, "crash": 1,
        "device_assert": 1,
    }  # fmt: skip


def test_plain_log_takes_times_from_prefixes(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "decode-0.log"
    path.write_text("".join(line + "\n" for _, _, line in real_lines()), encoding="utf-8")
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].format == "sglang"
    _, rows = forensics.query_rows("SELECT DISTINCT host FROM entries", db)
    assert rows == [("decode-0",)]  # from the file name
    _, ts = forensics.query_rows(
        "SELECT ts_us FROM entries WHERE message LIKE '[2025-03-14 02:16:14 TP0]%'", db
    )
    assert ts == [(1_741_918_574_000_000,)]
