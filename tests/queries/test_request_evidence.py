"""request_evidence on small hand-made cases the stock demo does not cover."""

from __future__ import annotations

from pathlib import Path

import orjson

import forensics


def test_a_line_without_a_room_is_not_about_a_request_without_one(tmp_path: Path, db: Path) -> None:
    # not PD: no rooms anywhere; the harness's clock gives the window
    log = tmp_path / "decode-0.log"
    log.write_text(
        "[2026-09-20 14:03:10] Decode batch, #running-req: 2, #token: 10, token usage: 0.1, "
        "gen throughput (token/s): 1.0, #queue-req: 0\n"
        "[2026-09-20 14:03:12] Abort running request. req.rid='other'\n"
        "[2026-09-20 14:03:13] ReqTimeStats(rid=mine, input_len=10, cached_input_len=0, "
        "output_len=2, attempts=0, type=decode): queue_duration=1.00ms, forward_duration=2.00ms\n"
    )
    results = tmp_path / "results.jsonl"
    row = {"session": "s", "round": 0, "rid": "mine", "corrupted": True,
           "start": 1789912991.0, "end": 1789912993.5}  # fmt: skip
    results.write_bytes(orjson.dumps(row) + b"\n")
    forensics.ingest([str(log), str(results)], db)
    _, rows = forensics.query_rows(
        "SELECT decode_host, clock, room, own_abort, other_aborts, running_req"
        " FROM request_evidence",
        db,
    )
    assert rows == [("decode-0", "client", None, False, 1, 2)]
