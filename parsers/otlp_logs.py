"""OpenTelemetry logs (OTLP JSON: an ExportLogsServiceRequest a line, as a collector's file
exporter writes it, `resourceLogs` → `scopeLogs` → `logRecords`): each log record an
entry under its resource's host, timed by its `timeUnixNano` (else `observedTimeUnixNano`),
its body as the message.

Dynamo's request trace written by its `otel` sink (lib/llm/src/request_trace/otel_sink.rs:
scope `dynamo.request_trace`, the body the event type, the record's JSON in the attribute
`payload`) is read as the trace it carries: the entry's message is that record, so the
`dynamo_request_trace` pattern reads it into `request_traces` as from a trace file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import orjson
import polars as pl

from .bounded import lines
from .journald.context import ReadContext
from .otlp import HOST_KEYS, MIN_START_US, plain_value

DYNAMO_SCOPE = "dynamo.request_trace"
CHUNK_ROWS = 50_000
LINE_BYTES = 64 << 20
TIME_KEYS = ("timeUnixNano", "time_unix_nano", "observedTimeUnixNano", "observed_time_unix_nano")


def sniff(head: bytes) -> str | None:
    """OTLP JSON logs: an object whose first key is resourceLogs."""
    lead = head.lstrip()[:64].replace(b" ", b"").replace(b"\n", b"").replace(b"\r", b"")
    return "otlp-logs" if lead.startswith((b'{"resourceLogs":', b'{"resource_logs":')) else None


def read_logs(stream: BinaryIO, ctx: ReadContext, host: str | None) -> Iterator[pl.DataFrame]:
    """Frames of (line, host, ts_us, text), a row a log record; a line that is no request
    quarantined with its reason, a record without a readable time counted."""
    rows: list[tuple[int, str | None, int | None, str]] = []
    n = 0
    for raw in lines(stream, ctx, LINE_BYTES):
        n += 1
        if not raw.strip():
            ctx.markers += 1
            continue
        try:
            rows += _records(n, orjson.loads(raw), host, ctx)
        except (orjson.JSONDecodeError, ValueError) as exc:
            ctx.reject(n, f"otlp-logs: {exc}", raw[:400])
        if len(rows) >= CHUNK_ROWS:
            yield _frame(rows)
            rows = []
    if rows:
        yield _frame(rows)
    ctx.lines = n


def _frame(rows: list[tuple[int, str | None, int | None, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"line": pl.Int64, "host": pl.String, "ts_us": pl.Int64,
                                      "text": pl.String}, orient="row")  # fmt: skip


def _records(n: int, obj: object, host: str | None, ctx: ReadContext
             ) -> list[tuple[int, str | None, int | None, str]]:  # fmt: skip
    """A request's log records as rows (raises ValueError: not an OTLP logs request)."""
    if not isinstance(obj, dict):
        raise ValueError("not an OTLP logs request (not a JSON object)")
    resources = obj.get("resourceLogs", obj.get("resource_logs"))
    if not isinstance(resources, list):
        raise ValueError("not an OTLP logs request (no resourceLogs list)")
    out = []
    for r in (x for x in resources if isinstance(x, dict)):
        res = r.get("resource") if isinstance(r.get("resource"), dict) else {}
        attrs = _attributes(res.get("attributes"))
        who = next((attrs[k] for k in HOST_KEYS if attrs.get(k)), None) or host
        for scope_logs in _list(r.get("scopeLogs", r.get("scope_logs"))):
            scope = scope_logs.get("scope") if isinstance(scope_logs.get("scope"), dict) else {}
            dynamo = scope.get("name") == DYNAMO_SCOPE
            for rec in _list(scope_logs.get("logRecords", scope_logs.get("log_records"))):
                out.append((n, who, _time(rec, ctx), _text(rec, dynamo)))
    return out


def _list(v: object) -> list[dict]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _attributes(items: object) -> dict[str, object]:
    return {str(kv.get("key")): plain_value(kv.get("value"), 0) for kv in _list(items)}


def _time(rec: dict, ctx: ReadContext) -> int | None:
    """µs of the record's time (else its observed time); none before 2000, counted."""
    for key in (
        "timeUnixNano",
        "time_unix_nano",
        "observedTimeUnixNano",
        "observed_time_unix_nano",
    ):
        try:
            us = int(rec.get(key) or 0) // 1000
        except (TypeError, ValueError):
            continue
        if us >= MIN_START_US:
            return us
    ctx.tally("log records without a readable time (stored untimed)")
    return None


def _text(rec: dict, dynamo: bool) -> str:
    """The message: Dynamo's trace record where the record carries one, else the body."""
    attrs = _attributes(rec.get("attributes"))
    if dynamo and isinstance(attrs.get("payload"), str):
        return attrs["payload"]
    body = plain_value(rec.get("body"), 0)
    return body if isinstance(body, str) else orjson.dumps(body).decode()
