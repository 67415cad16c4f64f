"""OpenTelemetry traces (issue 54): OTLP JSON and protobuf files `ingest` sniffs by
content, into the declared `spans` table, a span an entry under its resource's host; in
`follow`, the Perfetto trace and beside the journals in one ingest."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from forensics.parsers import otlp
from forensics.parsers.formats import read_stream, sniff_input
from forensics.parsers.journald.context import ReadContext

import forensics
from forensics.artifacts.trace import trace
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli
from tests.test_trace import Parsed, _read

DATA = Path(__file__).parent / "data" / "otlp"
FLIGHT = Path(__file__).parent / "data" / "flight-recorder"
RID = "3feed15121284a7691868f0465ce5392"


def _q(db: Path, sql: str) -> list[tuple]:
    return forensics.query_rows(sql, db)[1]


def test_a_collector_file_is_read_span_by_span_and_its_bad_lines_quarantined(
    tmp_path: Path,
) -> None:
    """SGLang's spans as its tracing code attributes them, Dynamo's frontend span: each a
    row under its resource's host, rid/room/x_request_id taken from the attributes (the
    room from SGLang's hex), the failed transfer slice's status kept; a line that is not
    JSON and a span without a traceId quarantined with their line numbers, the rest kept."""
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(DATA / "sglang-pd.jsonl")], db)
    assert _q(db, "SELECT format, entries, quarantined FROM sources") == [("otlp-json", 24, 2)]
    roots = _q(db, "SELECT host, rid, room, service FROM spans WHERE name LIKE '% Req %' "
                   "ORDER BY ts_us, host")  # fmt: skip
    assert roots[:2] == [("decode-0", RID, 7843302876549880350, "sglang-decode"),
                         ("prefill-0", RID, 7843302876549880350, "sglang-prefill")]  # fmt: skip
    assert _q(db, "SELECT host, x_request_id FROM spans WHERE service = 'dynamo-frontend' "
                  "ORDER BY ts_us")[0] == ("frontend-7d9f", RID)  # fmt: skip
    bad = _q(db, "SELECT name, status, status_message, (end_us - start_us) // 1000 FROM spans "
                 "WHERE status = 'ERROR'")  # fmt: skip
    assert bad == [("prefill_transfer_kv_cache", "ERROR",
                    "KVTransferError: Failed to send kv chunk", 290)]  # fmt: skip
    attrs = _q(db, "SELECT attributes['thread_label'], attributes['pid'] FROM spans "
                   "WHERE name LIKE 'Scheduler%' LIMIT 1")  # fmt: skip
    assert attrs == [("Scheduler", "4242")]
    q = _q(db, "SELECT line, reason FROM quarantine ORDER BY line")
    assert [line for line, _ in q] == [7, 8]
    assert (
        q[0][1].startswith("otlp-json: not JSON")
        and q[1][1] == "otlp: span 1 of line 8: no traceId"
    )


def test_every_form_of_the_specs_example_reads_alike(tmp_path: Path) -> None:
    """opentelemetry-proto's examples: its JSON (pretty-printed, numbers for times,
    upper-case hex), the same request encoded by its classes bare and length-prefixed
    (the file exporter's proto format), and the JSON in snake_case with base64 ids and an
    array value: one span, the same ids, times and attribute."""
    framed = (DATA / "trace.pb").read_bytes()
    snake = orjson.loads((DATA / "trace.json").read_bytes())
    span = snake["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["traceId"], span["spanId"] = "W47/95gDgQPSabYzgT/GDA==", "7uGbfsPBsXQ="
    span["attributes"].append({"key": "tags", "value": {"arrayValue": {"values": [
        {"stringValue": "a"}, {"intValue": 2}]}}})  # fmt: skip
    snake = {"resource_spans": [{"resource": snake["resourceSpans"][0]["resource"],
                                 "scope_spans": [{"scope": {"name": "my.library"},
                                                  "spans": [span]}]}]}  # fmt: skip
    (tmp_path / "snake.jsonl").write_bytes(orjson.dumps(snake) + b"\n")
    got = {}
    for name, path in [("json", DATA / "trace.json"), ("bare", DATA / "trace-bare.pb"),
                       ("framed", DATA / "trace.pb"), ("snake", tmp_path / "snake.jsonl")]:  # fmt: skip
        db = tmp_path / f"{name}.duckdb"
        forensics.ingest([str(path)], db)
        got[name] = _q(db, "SELECT trace_id, span_id, parent_span_id, name, kind, start_us, "
                           "end_us, service, attributes['my.span.attr'] FROM spans")  # fmt: skip
        if name == "snake":
            assert _q(db, "SELECT attributes['tags'] FROM spans") == [('["a","2"]',)]
    one = ("5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "eee19b7ec3c1b173",
           "I'm a server span", "SERVER", 1544712660000000, 1544712661000000, "my.service",
           "some value")  # fmt: skip
    assert got["json"] == got["bare"] == [one] and got["framed"] == [one, one]
    assert got["snake"] == [one]
    assert int.from_bytes(framed[:4], "big") == len(framed) // 2 - 4


def test_a_protobuf_trace_without_the_extra_is_one_quarantined_line(monkeypatch) -> None:
    """Without opentelemetry-proto the file is not read: one line names the extra."""
    import builtins

    real = builtins.__import__

    def no_otel(name, *args, **kw):
        if name.startswith("opentelemetry"):
            raise ImportError(name)
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    data = (DATA / "trace.pb").read_bytes()
    assert sniff_input(data) == "otlp-proto"
    ctx = ReadContext(name="trace.pb")
    import io

    tables = list(read_stream(io.BytesIO(data), "otlp-proto", ctx))
    assert sum(t.num_rows for t in tables) == 0
    (q,) = ctx.quarantine
    assert q.line == 1 and "pd-forensics[otel]" in q.reason


def test_sniffing_tells_otlp_from_other_json_and_binary() -> None:
    assert otlp.sniff(b'{"resourceSpans":[]}\n') == "otlp-json"
    assert otlp.sniff(b'{\n  "resourceSpans": [\n') == "otlp-json"
    assert otlp.sniff(b'{"schema":"dynamo.request.trace.v1"}') is None
    assert otlp.sniff((DATA / "trace-bare.pb").read_bytes()) == "otlp-proto"
    assert otlp.sniff(b"\x00\x00\x00\x10garbage that is no request") is None


def test_host_alias_maps_a_trace_host_and_the_rest_are_listed(tmp_path: Path) -> None:
    """A span's host is its resource's host.name: where that is not the journal's name,
    --host-alias maps it (said in the source's notes); the trace hosts no journal names
    are listed after the ingest."""
    db = tmp_path / "t.duckdb"
    journal = tmp_path / "decode-node-0.log"
    journal.write_text("[2026-05-28 20:26:40] Decode batch, #running-req: 1\n")
    proc = cli("ingest", str(DATA / "sglang-pd.jsonl"), str(journal), "--db", str(db),
               "--host-alias", "decode-0=decode-node-0", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    src = next(s for s in doc["sources"] if s["format"] == "otlp-json")
    assert "trace host 'decode-0' read as 'decode-node-0' (--host-alias)" in src["notes"]
    assert doc["summary"]["unmatched_trace_hosts"] == ["frontend-7d9f", "prefill-0"]
    assert _q(db, "SELECT count(*) FROM spans WHERE host = 'decode-node-0'") == [(12,)]
    bad = cli("ingest", str(DATA / "trace.json"), "--db", str(db), "--host-alias", "x")
    assert bad.returncode == 2 and "--host-alias takes TRACE=JOURNAL" in bad.stderr.decode()


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """A planted incident's journals, an OTLP file of one request's spans (on the
    incident's own hosts), Dynamo's request trace and two ranks' Flight Recorder dumps:
    one ingest of one folder."""
    d = tmp_path_factory.mktemp("incident")
    inc = generate_planted(None, seed=2, requests=60)
    files = write_planted(inc, d / "logs")
    r = next(r for r in inc.results if r["status"] == "ok")
    rid, start_ns = r["rid"], int(r["start"] * 1e9)
    trace_id = "0af7651916cd43dd8448eb211c80319c"

    def span(sid: str, parent: str, name: str, a_ms: int, b_ms: int, attrs: dict) -> dict:
        return {"traceId": trace_id, "spanId": sid, "parentSpanId": parent, "name": name,
                "kind": 1, "startTimeUnixNano": str(start_ns + a_ms * 1_000_000),
                "endTimeUnixNano": str(start_ns + b_ms * 1_000_000),
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}  # fmt: skip

    def req(host: str, spans: list) -> bytes:
        return orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
            {"key": "host.name", "value": {"stringValue": host}}]},
            "scopeSpans": [{"scope": {"name": "sglang"}, "spans": spans}]}]})  # fmt: skip

    lines = [
        req(
            "frontend-0",
            [span("00000000000000a1", "", "http-request", 0, 500, {"x_request_id": rid})],
        ),
        req(
            "decode-0",
            [
                span(
                    "00000000000000b1",
                    "00000000000000a1",
                    f"decode Req {rid[:8]}",
                    5,
                    490,
                    {"rid": rid},
                ),
                span("00000000000000b2", "00000000000000b1", "decode_loop", 100, 480, {}),
            ],
        ),
    ]
    (d / "traces.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    record = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
              "event_time_unix_ms": int(r["end"] * 1000),
              "request": {"request_id": "dyn-1", "x_request_id": rid, "ttft_ms": 80.0}}  # fmt: skip
    (d / "dynamo-request-trace.000001.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    shutil.copytree(FLIGHT, d / "fr", ignore=shutil.ignore_patterns("*.py", "*.md", "*.json"))
    db = d / "i.duckdb"
    proc = cli("ingest", str(d / "logs"), str(d / "traces.jsonl"),
               str(d / "dynamo-request-trace.000001.jsonl"), str(d / "fr"),
               "--db", str(db), "--host", "frontend-0", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(files) >= 2
    return db, rid, d


def test_one_ingest_takes_journals_traces_and_dumps(incident) -> None:
    db, _, _ = incident
    formats = {f for (f,) in _q(db, "SELECT DISTINCT format FROM sources")}
    assert {"otlp-json", "dynamo-request-trace", "flight-recorder"} <= formats
    assert _q(db, "SELECT count(*) FROM spans") == [(3,)]
    assert _q(db, "SELECT count(DISTINCT rank) FROM collectives") == [(2,)]


def test_follow_shows_one_request_across_journals_spans_and_its_trace_row(incident) -> None:
    """`follow RID`: the request's journal lines, Dynamo's trace row and every span of its
    trace — the child slice that names no rid too — in one time order."""
    db, rid, _ = incident
    got = json.loads(cli("follow", rid, "--db", str(db), "--json").stdout)
    msgs = [ln["message"] for ln in got["lines"]]
    spans = [ln for ln in got["lines"] if ln["message"].startswith('{"otlp_span":')]
    assert {json.loads(ln["message"])["otlp_span"] for ln in spans} == {
        "http-request", f"decode Req {rid[:8]}", "decode_loop"}  # fmt: skip
    assert any("dynamo.request.trace.v1" in m for m in msgs)
    journal = [ln for ln in got["lines"] if ln["host"] in ("prefill-0", "decode-0")
               and not ln["message"].startswith("{")]  # fmt: skip
    assert journal, "the request's own lines"
    times = [ln["ts_us"] for ln in got["lines"] if ln["ts_us"] is not None]
    assert times == sorted(times)


def test_the_report_names_the_rank_that_stopped_first(incident) -> None:
    db, _, _ = incident
    rep = json.loads(cli("report", "--db", str(db), "--json").stdout)
    (stopped,) = rep["flight_recorder"]["stopped"]
    assert (stopped["rank"], stopped["seq"]) == (1, 3), stopped


def test_the_perfetto_trace_shows_the_spans_on_their_hosts(incident, tmp_path: Path) -> None:
    """Parsed back: each span a slice on its host's track, its length its duration."""
    db, _, _ = incident
    out = tmp_path / "t.pftrace"
    trace(db, out)
    p = Parsed(_read(out))
    assert p.nest_errors == []
    got = {(p.host_of(t), p.args(b).get("span_id"), (end - start) // 1000)
           for t, start, end, b in p.slices if p.name_of(t).startswith("spans ")}  # fmt: skip
    assert got == {("frontend-0", "00000000000000a1", 500_000),
                   ("decode-0", "00000000000000b1", 485_000),
                   ("decode-0", "00000000000000b2", 380_000)}  # fmt: skip


def test_a_span_error_only_the_trace_carries_is_the_suspect(tmp_path: Path) -> None:
    """Most corrupted requests' traces hold a span that ended in ERROR (a few others' do
    too) and no log line says so: `suspects` ranks span_error first."""
    import random

    from forensics.analyses.suspects import suspects

    inc = generate_planted(None, seed=4, requests=600)
    rng = random.Random(9)
    spans = []
    for i, r in enumerate(inc.results):
        failed = rng.random() < (0.8 if r["corrupted"] else 0.05)
        t = int(r["start"] * 1e9)
        spans.append({"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "Req",
                      "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 10**8),
                      "attributes": [{"key": "rid", "value": {"stringValue": r["rid"]}}],
                      "status": {"code": 2} if failed else {}})  # fmt: skip
    files = write_planted(inc, tmp_path / "i")
    otel = tmp_path / "i" / "otel.jsonl"
    otel.write_bytes(orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "host.name", "value": {"stringValue": "decode-0"}}]},
        "scopeSpans": [{"spans": spans}]}]}) + b"\n")  # fmt: skip
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files] + [str(otel)], db, run="incident")
    res = suspects(db)
    top = res.suspects[0] if res.suspects else None
    assert top is not None and top.feature == "span_error", res.sentences()
    assert top.verdict == "suspect"


def test_the_dashboard_sets_corrupted_requests_span_durations_beside_the_good(
    tmp_path: Path,
) -> None:
    """Each judged request's trace: its transfer slice 10× longer where the reply came back
    corrupted. The spans panel draws a box per outcome, by span name, their medians apart."""
    from statistics import median

    from forensics.dashboards import panels

    inc = generate_planted(None, seed=4, requests=200)
    lines = []
    for i, r in enumerate(inc.results):
        t, ms = int(r["start"] * 1e9), (300 if r["corrupted"] else 30)
        root = {"traceId": f"{i + 1:032x}", "spanId": f"{2 * i + 1:016x}", "name": "Req",
                "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + 10**9),
                "attributes": [{"key": "rid", "value": {"stringValue": r["rid"]}}]}  # fmt: skip
        kv = {"traceId": f"{i + 1:032x}", "spanId": f"{2 * i + 2:016x}",
              "parentSpanId": f"{2 * i + 1:016x}", "name": "prefill_transfer_kv_cache",
              "startTimeUnixNano": str(t), "endTimeUnixNano": str(t + ms * 10**6)}  # fmt: skip
        lines.append(orjson.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [
            {"spans": [root, kv]}]}]}))  # fmt: skip
    files = write_planted(inc, tmp_path / "i")
    otel = tmp_path / "i" / "otel.jsonl"
    otel.write_bytes(b"\n".join(lines) + b"\n")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files] + [str(otel)], db, run="incident")
    p = panels.panels(db)
    assert p.drawn()["spans"] is None
    boxes = {t.name: t for t in panels.figure(p, "spans").data}
    assert set(boxes) == {"good requests", "corrupted requests"}
    kv_ms = {name: [y for x, y in zip(b.x, b.y, strict=True) if x == "prefill_transfer_kv_cache"]
             for name, b in boxes.items()}  # fmt: skip
    assert median(kv_ms["good requests"]) == 30 and median(kv_ms["corrupted requests"]) == 300
    n_bad = sum(r["corrupted"] for r in inc.results)
    assert len(kv_ms["corrupted requests"]) == n_bad


def test_the_rank_that_stopped_first_is_a_factor_of_its_hosts_requests(tmp_path: Path) -> None:
    """Two ranks' dumps taken on decode-0 (rank 1 stopped at seq 3): every request decoded
    there carries that stop as its `stopped_rank`, the others '(none)'; suspects weighs it."""
    from forensics.analyses.suspects import suspects

    inc = generate_planted(None, seed=4, requests=200)
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db, run="incident")
    dumps = [str(FLIGHT / f"nccl_trace_rank_{r}") for r in (0, 1)]
    forensics.ingest(dumps, db, run="incident", host="decode-0")
    got = dict(_q(db, "SELECT decode_host = 'decode-0', list(DISTINCT stopped_rank) "
                      "FROM request_features WHERE decode_host IS NOT NULL GROUP BY 1"))  # fmt: skip
    (stop,) = got[True]
    assert stop.startswith("decode-0 rank 1 at seq 3 (") and got[False] == ["(none)"]
    r = suspects(db).ranking
    assert "stopped_rank" in {t.feature for t in [*r.tested, *r.screened_out]}


def test_the_bundle_packs_spans_and_trace_rows_scrubbed(tmp_path: Path) -> None:
    """A span's attributes and status message and a trace row go into the bundle as
    tables, each secret in them scrubbed (a value under a secret's name, a token, a URL's
    password), the rest of the row kept."""
    from tests.test_bundle import _found, _members

    secrets = ["hf_abcdefghijklmnopqrstuvwxyz0123", "Pa55-in-url-888", "Tok-999-bearer"]
    sp = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "00000000000000a1",
          "name": "http-request", "startTimeUnixNano": "1780000000000000000",
          "endTimeUnixNano": "1780000000500000000",
          "attributes": [{"key": "x_request_id", "value": {"stringValue": RID}},
                         {"key": "hf_token", "value": {"stringValue": "Tok-999-bearer"}},
                         {"key": "note", "value": {"stringValue": secrets[0]}}],
          "status": {"code": 2, "message": "POST http://u:Pa55-in-url-888@router:8000 failed"}}  # fmt: skip
    (tmp_path / "t.jsonl").write_bytes(orjson.dumps({"resourceSpans": [{"resource": {
        "attributes": [{"key": "host.name", "value": {"stringValue": "frontend-0"}}]},
        "scopeSpans": [{"spans": [sp]}]}]}) + b"\n")  # fmt: skip
    rec = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
           "event_time_unix_ms": 1_780_000_000_600,
           "request": {"request_id": "dyn-1", "x_request_id": RID, "ttft_ms": 80.0}}  # fmt: skip
    (tmp_path / "d.jsonl").write_bytes(orjson.dumps(rec) + b"\n")
    db = tmp_path / "b.duckdb"
    forensics.ingest([str(tmp_path / "t.jsonl"), str(tmp_path / "d.jsonl")], db, host="frontend-0")
    assert _q(db, "SELECT attributes['hf_token'] FROM spans") == [("Tok-999-bearer",)]
    out = tmp_path / "b.tar.zst"
    forensics.bundle(db, out)
    m = _members(out)
    spans = pq.read_table(io.BytesIO(m["tables/spans.parquet"])).to_pylist()
    traces = pq.read_table(io.BytesIO(m["tables/request_traces.parquet"])).to_pylist()
    assert [(s["x_request_id"], s["status"]) for s in spans] == [(RID, "ERROR")]
    assert [(t["x_request_id"], t["ttft_ms"]) for t in traces] == [(RID, 80.0)]
    for secret in secrets:
        assert _found(m, secret) == [], secret


def test_a_thread_spans_ranks_fill_the_rank_columns(tmp_path: Path) -> None:
    """SGLang's thread spans state tp_rank (and pp_rank, dp_rank where it runs them) as
    attributes: they are the spans' rank columns, as a prefixed line's tags are."""
    db = tmp_path / "r.duckdb"
    forensics.ingest([str(DATA / "sglang-pd.jsonl")], db)
    rows = _q(db, "SELECT DISTINCT tp, pp, dp FROM spans WHERE attributes['tp_rank'] IS NOT NULL")
    assert rows == [(0, None, None)]
    assert _q(db, "SELECT count(*) FROM spans WHERE tp IS NOT NULL AND "
                  "attributes['tp_rank'] IS NULL") == [(0,)]  # fmt: skip
