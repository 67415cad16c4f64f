"""Writes the OTLP samples beside it (README.md says where each form comes from):

- sglang-pd.jsonl: a collector file exporter's OTLP JSON lines (hex ids, 64-bit integers
  as strings, enums as integers: OTLP/JSON as the spec defines it) of two SGLang PD
  requests, spans named and attributed as SGLang 0.5.23's observability/trace.py and
  req_time_stats.py make them (root `decode Req <rid[:8]>` with `rid`, `module`,
  `bootstrap_room` in hex; a thread span with `host_id`, `pid`, `thread_label`, `tp_rank`;
  stage slices `prefill_bootstrap`, `prefill_forward`, `prefill_transfer_kv_cache`,
  `decode_bootstrap`, `decode_waiting`, `decode_transferred`, `decode_loop`), and a Dynamo
  frontend span carrying `x_request_id` (lib/runtime/src/logging.rs); the second
  request's transfer slice has status ERROR. Then a line that is not JSON, and a span
  without a traceId: each quarantined, the rest kept.
- trace.pb: opentelemetry-proto's examples/trace.protobuf-text request, encoded by
  opentelemetry-proto's own classes, as the file exporter's proto format writes it (each
  request after its 4-byte big-endian length), twice; trace-bare.pb: the request alone.

Run: python tests/data/otlp/make_samples.py (needs opentelemetry-proto).
"""

from __future__ import annotations

import struct
from pathlib import Path

import orjson

HERE = Path(__file__).parent
T0 = 1_780_000_000_000_000_000  # ns: 2026-05-28T20:26:40Z
RID = "3feed15121284a7691868f0465ce5392"
RID2 = "7ac0ffee90a14b2f8d6e5c4b3a291807"
ROOM, ROOM2 = 7843302876549880350, 1234567890123456789


def s(v: str) -> dict:
    return {"stringValue": v}


def i(v: int) -> dict:
    return {"intValue": str(v)}


def kv(**attrs: dict) -> list[dict]:
    return [{"key": k, "value": v} for k, v in attrs.items()]


def span(trace: str, sid: str, parent: str, name: str, start_ms: float, end_ms: float,
         attrs: list | None = None, error: str | None = None) -> dict:  # fmt: skip
    out = {"traceId": trace, "spanId": sid, "parentSpanId": parent, "name": name, "kind": 1,
           "startTimeUnixNano": str(T0 + int(start_ms * 1e6)),
           "endTimeUnixNano": str(T0 + int(end_ms * 1e6)),
           "attributes": attrs or [], "status": {}}  # fmt: skip
    if error:
        out["status"] = {"code": 2, "message": error}
    return out


def request(host: str, service: str, spans: list[dict]) -> bytes:
    res = {"attributes": kv(**{"service.name": s(service), "host.name": s(host)})}
    return orjson.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [
        {"scope": {"name": "sglang"}, "spans": spans}]}]})  # fmt: skip


def sglang_request(rid: str, room: int, trace: str, at: float, fail: bool) -> list[bytes]:
    def side(role: str, host: str, sid0: int, slices: list[tuple[str, float, float]]) -> bytes:
        root = f"{sid0:016x}"
        thread = f"{sid0 + 1:016x}"
        spans = [
            span(trace, root, "", f"{role} Req {rid[:8]}", at, at + 400,
                 kv(rid=s(rid), module=s("sglang::scheduler"), bootstrap_room=s(hex(room)))),
            span(trace, thread, root, "Scheduler(host:a1b2c3d4 | pid:4242)", at, at + 400,
                 kv(host_id=s("a1b2c3d4e5f60718"), pid=i(4242), thread_label=s("Scheduler"),
                    tp_rank=i(0))),
        ]  # fmt: skip
        for k, (name, a, b) in enumerate(slices):
            err = ("KVTransferError: Failed to send kv chunk" if fail
                   and name == "prefill_transfer_kv_cache" else None)  # fmt: skip
            spans.append(span(trace, f"{sid0 + 2 + k:016x}", thread, name, at + a, at + b,
                              error=err))  # fmt: skip
        return request(host, f"sglang-{role}", spans)

    prefill = side("prefill", "prefill-0", 0x1000 + int(at), [
        ("prefill_bootstrap", 0, 5), ("prefill_forward", 5, 60),
        ("prefill_transfer_kv_cache", 60, 90 if not fail else 350)])  # fmt: skip
    decode = side("decode", "decode-0", 0x2000 + int(at), [
        ("decode_bootstrap", 0, 6), ("decode_waiting", 6, 90 if not fail else 350),
        ("decode_transferred", 90 if not fail else 350, 92 if not fail else 352),
        ("decode_loop", 92 if not fail else 352, 400)])  # fmt: skip
    return [prefill, decode]


def dynamo(rid: str, trace: str, at: float) -> bytes:
    res = {"attributes": kv(**{"service.name": s("dynamo-frontend"),
                               "k8s.pod.name": s("frontend-7d9f")})}  # fmt: skip
    sp = span(trace, f"{0x3000 + int(at):016x}", "", "http-request", at - 2, at + 405,
              kv(method=s("POST"), uri=s("/v1/chat/completions"), x_request_id=s(rid),
                 request_id=s("0f6b2c1e-5d3a-4c8e-9b7a-2e4f6a8c0d1b")))  # fmt: skip
    sp["kind"] = 2
    return orjson.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [
        {"scope": {"name": "dynamo"}, "spans": [sp]}]}]})  # fmt: skip


def jsonl() -> bytes:
    t1, t2 = "5b8efff798038103d269b633813fc60c", "0af7651916cd43dd8448eb211c80319c"
    lines = [*sglang_request(RID, ROOM, t1, 0, False), dynamo(RID, t1, 0),
             *sglang_request(RID2, ROOM2, t2, 1000, True), dynamo(RID2, t2, 1000),
             b'{"resourceSpans": [ cut off by a full disk',
             request("decode-0", "sglang-decode",
                     [{"spanId": "00000000000000ff", "name": "no trace id",
                       "startTimeUnixNano": str(T0)}])]  # fmt: skip
    return b"\n".join(lines) + b"\n"


def protobuf() -> tuple[bytes, bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name",
                                           value=AnyValue(string_value="my.service")))  # fmt: skip
    ss = rs.scope_spans.add()
    ss.scope.name, ss.scope.version = "my.library", "1.0.0"
    ss.scope.attributes.append(KeyValue(key="my.scope.attribute",
                                        value=AnyValue(string_value="some scope attribute")))  # fmt: skip
    sp = ss.spans.add()
    sp.trace_id = bytes.fromhex("5B8EFFF798038103D269B633813FC60C")
    sp.span_id = bytes.fromhex("EEE19B7EC3C1B174")
    sp.parent_span_id = bytes.fromhex("EEE19B7EC3C1B173")
    sp.name = "I'm a server span"
    sp.start_time_unix_nano, sp.end_time_unix_nano = 1544712660000000000, 1544712661000000000
    sp.kind = Span.SPAN_KIND_SERVER
    sp.attributes.append(KeyValue(key="my.span.attr", value=AnyValue(string_value="some value")))
    blob = req.SerializeToString()
    framed = struct.pack(">I", len(blob)) + blob
    return framed * 2, blob


if __name__ == "__main__":
    (HERE / "sglang-pd.jsonl").write_bytes(jsonl())
    framed, bare = protobuf()
    (HERE / "trace.pb").write_bytes(framed)
    (HERE / "trace-bare.pb").write_bytes(bare)
