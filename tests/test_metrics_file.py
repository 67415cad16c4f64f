"""SGLang's --export-metrics-to-file records (`sglang-request-metrics-YYYYMMDD_HH.log`) as
an input form of their own: sniffed, found inside directories, timed by their own
timestamps (else the hour of the file's name), the server named by the folder, every
record into request_meta, and a bad line quarantined without costing the others."""

from __future__ import annotations

import json
from pathlib import Path

from forensics.parsers.formats import sniff_input

import forensics

from .test_real_lines import real_lines


def _record(rid: str, room: int, **meta: object) -> str:
    """A record as the exporter writes it: json.dump of request_parameters (a JSON text of
    the request's fields) and then meta_info's keys."""
    params = {"text": "<|im_start|>user\nhi \"there\"<|im_end|>\n", "rid": rid,
              "bootstrap_host": "10.0.4.11", "bootstrap_room": room}  # fmt: skip
    return json.dumps({"request_parameters": json.dumps(params), "id": rid, **meta})


def _real() -> str:
    return next(line for t, origin, line in real_lines() if "request_metrics_exporter" in origin)


def test_metrics_files_in_a_directory_land_in_request_meta(tmp_path: Path, db: Path) -> None:
    folder = tmp_path / "decode-1"
    folder.mkdir()
    timed = _record("a1", 11, finish_reason={"type": "abort", "message": "KV transfer failed",
                    "status_code": 500}, num_retractions=2, e2e_latency=1.5,
                    response_sent_to_client_ts=1789912999.25)  # fmt: skip
    untimed = _record("b2", 22, finish_reason={"type": "stop"}, cached_tokens=64)
    path = folder / "sglang-request-metrics-20260920_14.log"
    path.write_text(f"{_real()}\n{timed}\nnot json at all\n\n{untimed}\n", encoding="utf-8")
    assert sniff_input(path.read_bytes()[:4096]) == "sglang-metrics"
    res = forensics.ingest([str(tmp_path)], db)
    (src,) = res.sources
    assert (src.format, src.entries, src.quarantined) == ("sglang-metrics", 3, 1)
    assert any("timed by the hour in the file's name" in n for n in src.notes)
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine", db)
    assert q == [(3, "sglang-metrics: not a request metrics record")]
    _, rows = forensics.query_rows(
        """SELECT rid, room, host, ts_us, finish_type, finish_message, status_code,
                  num_retractions, cached_tokens FROM request_meta ORDER BY rid""",
        db,
    )
    assert rows == [
        ("3feed15121284a7691868f0465ce5392", 7301934425522180813, "decode-1",
         1787481184262518, "length", None, None, 0, 4),
        ("a1", 11, "decode-1", 1789912999250000, "abort", "KV transfer failed", 500, 2, None),
        # no timestamp of its own: the hour the file is named after (read as UTC)
        ("b2", 22, "decode-1", 1789912800000000, "stop", None, None, None, 64),
    ]  # fmt: skip


def test_a_metrics_record_never_continues_the_one_before(tmp_path: Path, db: Path) -> None:
    # a prompt that holds a traceback's first line must not swallow the next record
    first = _record("t1", 1, finish_reason={"type": "stop"})
    first = first.replace("hi", "Traceback (most recent call last):")
    path = tmp_path / "sglang-request-metrics-20260920_15.log"
    path.write_text(f"{first}\n{_record('t2', 2)}\n", encoding="utf-8")
    res = forensics.ingest([str(path)], db, host="decode-2")
    assert res.sources[0].entries == 2
    assert forensics.query_rows("SELECT count(*) FROM request_meta", db)[1] == [(2,)]


def test_a_record_with_the_current_exporters_fields_is_read(tmp_path: Path, db: Path) -> None:
    """A record of SGLang 0.5.23's exporter (srt/observability/request_metrics_exporter.py:
    `request_parameters` — json.dumps of the request's non-None fields — then meta_info's
    keys as the tokenizer manager fills them: id, finish_reason, prompt_tokens,
    weight_version, num_retractions, reasoning_tokens, completion_tokens, cached_tokens,
    cached_tokens_details, e2e_latency, and with --enable-metrics req_time_stats.py's
    request_received_ts, first_token_latency, api_server_dispatch_finish_ts,
    response_sent_to_client_ts, request_finished_ts, decode_throughput): its columns typed,
    the rest in extra, timed by response_sent_to_client_ts."""
    meta = {"finish_reason": {"type": "stop", "matched": 151645}, "prompt_tokens": 2048,
            "weight_version": "default", "num_retractions": 1, "reasoning_tokens": 12,
            "completion_tokens": 256, "cached_tokens": 1024,
            "cached_tokens_details": {"device": 1024, "host": 0}, "e2e_latency": 1.25,
            "request_received_ts": 1789912998.0, "first_token_latency": 0.2,
            "api_server_dispatch_finish_ts": 1789912998.01,
            "response_sent_to_client_ts": 1789912999.25, "request_finished_ts": 1789912999.2,
            "decode_throughput": 240.5}  # fmt: skip
    folder = tmp_path / "decode-0"
    folder.mkdir()
    path = folder / "sglang-request-metrics-20260920_14.log"
    path.write_text(_record("c3", 33, **meta) + "\n", encoding="utf-8")
    forensics.ingest([str(path)], db)
    _, rows = forensics.query_rows(
        "SELECT rid, room, finish_type, prompt_tokens, completion_tokens, cached_tokens, "
        "num_retractions, e2e_latency, ts_us, host, extra FROM request_meta", db)  # fmt: skip
    ((rid, room, finish, prompt, out, cached, retr, e2e, ts, host, extra),) = rows
    assert (rid, room, finish, prompt, out, cached, retr, e2e) == (
        "c3", 33, "stop", 2048, 256, 1024, 1, 1.25)  # fmt: skip
    assert ts == 1789912999250000 and host == "decode-0"
    rest = json.loads(extra)
    assert rest["decode_throughput"] == 240.5 and rest["first_token_latency"] == 0.2
    assert rest["cached_tokens_details"] == {"device": 1024, "host": 0}
