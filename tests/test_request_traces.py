"""Dynamo's request trace (issue 54): a source `ingest` sniffs by content, into the
declared `request_traces` table, joined to the harness's results by X-Request-Id."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson

import forensics
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli

RID = "3feed15121284a7691868f0465ce5392"

SCHEMA = "dynamo.request.trace.v1"


def _record(i: int, x_request_id: str, at_ms: int, **request) -> dict:
    """A request_end record as lib/llm/src/request_trace/types.rs serializes one."""
    return {"schema": SCHEMA, "event_type": "request_end", "event_time_unix_ms": at_ms,
            "event_source": "dynamo",
            "request": {"request_id": f"dyn-{i}", "x_request_id": x_request_id,
                        "request_received_ms": at_ms - 900, "ttft_ms": 120.0 + i,
                        "total_time_ms": 900.0, "kv_transfer_estimated_latency_ms": 4.5,
                        "worker": {"prefill_worker_id": 11, "decode_worker_id": 22,
                                   "decode_dp_rank": 1}, **request}}  # fmt: skip


def test_a_trace_segment_is_sniffed_by_content_and_its_bad_line_quarantined(
    tmp_path: Path,
) -> None:
    """A gzip segment under a name that says nothing: read as Dynamo's request trace, every
    documented field typed; a malformed line and a JSON log line that is no record are
    quarantined with their line numbers, the rest kept."""
    good = [_record(i, f"x{i}", 1_780_000_000_000 + 1000 * i) for i in range(4)]
    lines = [orjson.dumps(r) for r in good[:2]] + [b"{not json", b'{"level": "INFO"}']
    lines += [orjson.dumps(r) for r in good[2:]]
    path = tmp_path / "capture-0001.gz"
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(path)], db, host="frontend-0")
    _, rows = forensics.query_rows(
        "SELECT rid, x_request_id, ttft_ms, kv_transfer_estimated_latency_ms, "
        "decode_worker_id, decode_dp_rank, request_received_ms, ts_us FROM request_traces "
        "ORDER BY rid", db)  # fmt: skip
    assert [r[0] for r in rows] == ["dyn-0", "dyn-1", "dyn-2", "dyn-3"]
    assert rows[1][1:7] == ("x1", 121.0, 4.5, 22, 1, 1_780_000_000_100)
    assert rows[1][7] == 1_780_000_001_000_000  # the record's event time, µs
    _, fmt = forensics.query_rows("SELECT format, quarantined FROM sources", db)
    assert fmt == [("dynamo-request-trace", 2)]
    _, bad = forensics.query_rows("SELECT line, reason FROM quarantine ORDER BY line", db)
    assert bad == [(3, "dynamo-request-trace: not a record of its kind"),
                   (4, "dynamo-request-trace: not a record of its kind")]  # fmt: skip


def test_follow_shows_a_requests_trace_row_beside_its_lines(tmp_path: Path) -> None:
    """The reproducer sends its rid as X-Request-Id: the trace row that carries it is one
    of the request's lines in `follow`."""
    inc = generate_planted(None, seed=2, requests=60)
    files = write_planted(inc, tmp_path / "i")
    rid = next(r["rid"] for r in inc.results if r["status"] == "ok")
    start = int(next(r["start"] for r in inc.results if r["rid"] == rid) * 1000)
    trace = tmp_path / "i" / "trace.jsonl"
    trace.write_text(json.dumps(_record(0, rid, start + 950)) + "\n")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    forensics.ingest([str(trace)], db, host="frontend-0", run=forensics.query_rows(
        "SELECT run FROM runs", db)[1][0][0])  # fmt: skip
    got = json.loads(cli("follow", rid, "--db", str(db), "--json").stdout)
    hosts = {ln["host"] for ln in got["lines"]}
    assert "frontend-0" in hosts and {"prefill-0"} <= hosts
    traced = [ln for ln in got["lines"] if ln["host"] == "frontend-0"]
    assert len(traced) == 1 and SCHEMA in traced[0]["message"]


def test_a_slow_kv_transfer_only_the_trace_carries_is_the_suspect(tmp_path: Path) -> None:
    """The router's KV transfer estimate is high for most corrupted requests and a few
    others — a factor no SGLang line carries: `suspects` ranks it first."""
    import random

    from forensics.analyses.suspects import suspects

    inc = generate_planted(None, seed=4, requests=600)
    rng = random.Random(9)
    records = []
    for i, r in enumerate(inc.results):
        slow = rng.random() < (0.8 if r["corrupted"] else 0.05)
        kv = rng.uniform(60, 90) if slow else rng.uniform(2, 8)
        records.append(_record(i, r["rid"], int(r["end"] * 1000),
                               kv_transfer_estimated_latency_ms=round(kv, 2)))  # fmt: skip
    files = write_planted(inc, tmp_path / "i")
    trace = tmp_path / "i" / "dynamo-request-trace.000001.jsonl.gz"
    trace.write_bytes(gzip.compress(b"\n".join(orjson.dumps(r) for r in records) + b"\n"))
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db, run="incident")
    forensics.ingest([str(trace)], db, run="incident", host="frontend-0")
    res = suspects(db)
    top = res.suspects[0] if res.suspects else None
    assert top is not None and top.feature == "trace_kv_transfer_ms", res.sentences()
    assert "KV transfer" in top.predicate and top.verdict == "suspect"


def test_the_fields_no_column_names_are_kept_in_extra(tmp_path: Path) -> None:
    """types.rs's own replay record and a tool event: the fields the table has no column
    for are in `extra` under their dotted paths, lists as JSON; the typed ones are not."""
    lines = [
        '{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1100,'
        '"request":{"request_id":"req-1","output_tokens":4,"request_received_ms":1000,'
        '"replay":{"trace_block_size":2,"input_length":4,"input_sequence_hashes":[11,22]}}}',
        '{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":2000,'
        '"tool":{"tool_call_id":"call-1","status":"succeeded","output_bytes":1200,"ok":true}}',
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(path)], db, host="frontend-0")
    _, rows = forensics.query_rows(
        "SELECT event_type, output_tokens, extra FROM request_traces ORDER BY ts_us", db
    )
    (end, out, extra), (tool, _, extra2) = rows
    assert (end, out) == ("request_end", 4)
    assert extra == {"schema": "dynamo.request.trace.v1", "event_time_unix_ms": "1100",
                     "request.replay.trace_block_size": "2", "request.replay.input_length": "4",
                     "request.replay.input_sequence_hashes": "[11,22]"}  # fmt: skip
    assert tool == "tool_end" and extra2 == {
        "schema": "dynamo.request.trace.v1", "event_time_unix_ms": "2000",
        "tool.output_bytes": "1200", "tool.ok": "true"}  # fmt: skip


def test_dynamos_otel_sink_is_read_as_its_trace(tmp_path: Path) -> None:
    """OTLP logs as Dynamo's otel sink writes its request trace (otel_sink.rs: scope
    dynamo.request_trace, the body the event type, the record's JSON in the attribute
    `payload`): the record lands in request_traces under the resource's host, timed by
    the log record; another scope's record is an entry with its body; a record without a
    time is counted; a line that is no request is quarantined."""
    rec = {
        "schema": "dynamo.request.trace.v1",
        "event_type": "request_end",
        "event_time_unix_ms": 1_780_000_001_250,
        "event_source": "dynamo",
        "request": {"request_id": "req-otel", "x_request_id": RID, "ttft_ms": 201.75},
    }
    attrs = [
        {"key": "schema", "value": {"stringValue": "dynamo.request.trace.v1"}},
        {"key": "event_type", "value": {"stringValue": "request_end"}},
        {"key": "rid", "value": {"stringValue": "req-otel"}},
        {"key": "payload_complete", "value": {"boolValue": True}},
        {"key": "payload", "value": {"stringValue": json.dumps(rec)}},
    ]
    res = {
        "attributes": [
            {"key": "service.name", "value": {"stringValue": "dynamo"}},
            {"key": "host.name", "value": {"stringValue": "frontend-0"}},
        ]
    }
    req = {"resourceLogs": [{"resource": res, "scopeLogs": [
        {"scope": {"name": "dynamo.request_trace"}, "logRecords": [
            {"timeUnixNano": "1780000001250000000", "severityNumber": 9,
             "body": {"stringValue": "request_end"}, "attributes": attrs}]},
        {"scope": {"name": "app"}, "logRecords": [
            {"timeUnixNano": "1780000001300000000", "severityText": "ERROR",
             "body": {"stringValue": "KV transfer failed for request req-otel"}},
            {"timeUnixNano": "0", "body": {"stringValue": "no time"}}]}]}]}  # fmt: skip
    (tmp_path / "logs.jsonl").write_bytes(orjson.dumps(req) + b"\nnot json\n")
    db = tmp_path / "o.duckdb"
    forensics.ingest([str(tmp_path / "logs.jsonl")], db)
    _, src = forensics.query_rows("SELECT format, entries, quarantined, notes FROM sources", db)
    assert src[0][:3] == ("otlp-logs", 3, 1)
    assert "1 × log records without a readable time (stored untimed)" in src[0][3]
    _, rows = forensics.query_rows(
        "SELECT rid, x_request_id, ttft_ms, host, ts_us FROM request_traces", db)  # fmt: skip
    assert rows == [("req-otel", RID, 201.75, "frontend-0", 1_780_000_001_250_000)]
    _, msgs = forensics.query_rows("SELECT message FROM entries ORDER BY entry_no", db)
    assert msgs[1:] == [("KV transfer failed for request req-otel",), ("no time",)]
