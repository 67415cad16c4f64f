"""OpenTelemetry traces as the collector's file exporter writes them: OTLP JSON (one
ExportTraceServiceRequest a line, or one pretty-printed document) and OTLP protobuf
(length-prefixed requests, or one bare request; read through the optional `otel` extra,
opentelemetry-proto). Each span becomes one line the `otlp_span` pattern reads into
`spans`, timed by its start and stored under its own host.

Definitions: opentelemetry-proto's trace/v1/trace.proto and its JSON mapping (ids as hex,
64-bit integers as strings or numbers, enums as integers). A span's host is its resource's
`host.name`, else `k8s.pod.name`, else `service.instance.id` (else the file's host).
Request keys come from the attribute names the stacks' tracing code sets:
- `rid`, `bootstrap_room` (hex text): SGLang's request root span (sglang/srt/observability/
  trace.py, 0.5.23: `attrs = {"rid": orig_rid, …}; attrs["bootstrap_room"] = hex(room)`);
- `request_id`, `x_request_id`: Dynamo's request spans (lib/runtime/src/logging.rs reads
  `x_request_id` among a span's fields; its frontend's span records `request_id`);
- `http.request.header.x-request-id`: OpenTelemetry's HTTP semantic conventions (a header
  captured as an attribute: a list of its values).

Reading is columnar: a chunk of lines is read by Arrow's JSON reader against the schema
below and flattened in polars (a 94 MB line of 160 k spans: 0.3 GB and 1 s, where a Python
object tree took 1 GB and 2.7 s). A line Arrow cannot read as it is (numbers where the
spec allows strings, snake_case keys, base64 ids, array or map values) is put in the one
form first, through orjson.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator

import orjson
import polars as pl
import pyarrow as pa

# bytes of lines read by Arrow at once (100 MB of spans: 0.99 GB peak at 16 MB, 0.76 at 4);
# spans rendered this many at a time (one 100 MB collector line holds 178 k of them: 1.11
# GB peak at 20 k, 0.93 at 5 k, as fast)
MAX_CHUNK = 4 << 20
MIN_START_US = 946_684_800_000_000  # 2000-01-01: an earlier start is protobuf's unset 0
MAX_REQUEST = 64 << 20  # a protobuf request read at most (its dict is ~15 times its bytes)
MAX_DEPTH = 64  # levels of an array or map value kept; deeper is said, not walked
SLICE = 5_000
_HEX = frozenset("0123456789abcdefABCDEF")
KINDS = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
STATUS = ("UNSET", "OK", "ERROR")
HOST_KEYS = ("host.name", "k8s.pod.name", "service.instance.id")
RID_KEYS = ("rid", "request_id")
X_REQUEST_ID_KEYS = ("x_request_id", "http.request.header.x-request-id")
ROOM_KEYS = ("bootstrap_room",)
SPAN_RANKS = {"tp": "tp_rank", "pp": "pp_rank", "dp": "dp_rank"}  # rank column -> attribute
_NEEDS_CANON = (b'"arrayValue"', b'"kvlistValue"', b'"bytesValue"', b'"resource_spans"')


def _schema() -> pa.Schema:
    value = pa.struct([("stringValue", pa.string()), ("intValue", pa.string()),
                       ("doubleValue", pa.float64()), ("boolValue", pa.bool_())])  # fmt: skip
    kvs = pa.list_(pa.struct([("key", pa.string()), ("value", value)]))
    span = pa.struct([
        ("traceId", pa.string()), ("spanId", pa.string()), ("parentSpanId", pa.string()),
        ("name", pa.string()), ("kind", pa.int64()),
        ("startTimeUnixNano", pa.string()), ("endTimeUnixNano", pa.string()),
        ("attributes", kvs),
        ("status", pa.struct([("code", pa.int64()), ("message", pa.string())])),
    ])  # fmt: skip
    scope = pa.struct([("name", pa.string()), ("version", pa.string())])
    scope_spans = pa.struct([("scope", scope), ("spans", pa.list_(span))])
    resource = pa.struct([("attributes", kvs)])
    resource_spans = pa.struct([("resource", resource), ("scopeSpans", pa.list_(scope_spans))])
    return pa.schema([("resourceSpans", pa.list_(resource_spans))])


SCHEMA = _schema()


class NoProtobuf(RuntimeError):
    """opentelemetry-proto is not installed (the `otel` extra)."""


def sniff(head: bytes) -> str | None:
    """OTLP JSON (an object whose first key is resourceSpans; resourceLogs: its logs) or
    OTLP protobuf (an ExportTraceServiceRequest, bare or after its 4-byte big-endian
    length)."""
    lead = head.lstrip()[:64].replace(b" ", b"").replace(b"\n", b"").replace(b"\r", b"")
    if lead.startswith((b'{"resourceSpans":', b'{"resource_spans":')):
        return "otlp-json"
    if lead.startswith((b'{"resourceLogs":', b'{"resource_logs":')):
        return "otlp-logs"
    if framed_request(head):
        return "otlp-proto"
    return "otlp-proto" if _proto_head(head) and len(head) > 16 else None


def framed_request(head: bytes) -> bool:
    """Bytes that open the file exporter's proto format: a request after its length."""
    return int.from_bytes(head[:4], "big") > 0 and _proto_head(head[4:])


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    value = shift = 0
    while at < len(data) and shift < 64:
        b = data[at]
        value |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return value, at
        shift += 7
    return None


def _proto_head(data: bytes) -> bool:
    """Bytes that open a request: field 1 (resource_spans, length-delimited) holding
    field 1 (resource) or 2 (scope_spans), each a message that fits."""
    if len(data) < 4 or data[0] != 0x0A:
        return False
    outer = _varint(data, 1)
    if outer is None or outer[0] < 2 or outer[1] >= len(data) or data[outer[1]] not in (0x0A, 0x12):
        return False
    inner = _varint(data, outer[1] + 1)
    return inner is not None and inner[0] + inner[1] - outer[1] <= outer[0]


# -- one form ------------------------------------------------------------------------------
def _snake_to_camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _hex_id(v: object) -> str | None:
    """An id as lowercase hex: OTLP JSON's hex, or base64 (protobuf's JSON mapping)."""
    if not isinstance(v, str) or not v:
        return None
    if all(c in _HEX for c in v):
        return v.lower()
    try:
        return base64.b64decode(v, validate=True).hex()
    except (binascii.Error, ValueError):
        return v


def _text(v: dict) -> dict:
    """An AnyValue as the schema's: arrays, maps and bytes as JSON or hex text."""
    if not isinstance(v, dict):
        return {"stringValue": None if v is None else str(v)}
    v = {_snake_to_camel(k): x for k, x in v.items()}
    if "arrayValue" in v or "kvlistValue" in v:  # rendered once, as JSON of plain values
        return {"stringValue": orjson.dumps(plain_value(v, 0)).decode()}
    if "bytesValue" in v:
        return {"stringValue": _hex_id(v["bytesValue"])}
    out = {}
    for k in ("stringValue", "intValue"):
        if k in v and v[k] is not None:
            out[k] = str(v[k]).lower() if isinstance(v[k], bool) else str(v[k])
    if "doubleValue" in v:
        try:
            out["doubleValue"] = float(v["doubleValue"])
        except (TypeError, ValueError):
            out["stringValue"] = str(v["doubleValue"])
    if isinstance(v.get("boolValue"), bool):
        out["boolValue"] = v["boolValue"]
    return out


def plain_value(v: object, depth: int) -> object:
    """An AnyValue as a plain value: an array a list, a map a dict (a level's text is never
    escaped into the level above: that doubled the length a level), MAX_DEPTH levels at
    most."""
    if not isinstance(v, dict):
        return v
    v = {_snake_to_camel(k): x for k, x in v.items()}
    if depth >= MAX_DEPTH and ("arrayValue" in v or "kvlistValue" in v):
        return f"<past {MAX_DEPTH} levels>"
    if "arrayValue" in v:
        vals = (v["arrayValue"] or {}).get("values") or []
        return [plain_value(x, depth + 1) for x in vals] if isinstance(vals, list) else None
    if "kvlistValue" in v:
        kvs = (v["kvlistValue"] or {}).get("values") or []
        return {str(k.get("key")): plain_value(k.get("value"), depth + 1)
                for k in (kvs if isinstance(kvs, list) else []) if isinstance(k, dict)}  # fmt: skip
    return next((x for x in _text(v).values() if x is not None), None)


def _kvs(items: object) -> list[dict]:
    if not isinstance(items, list):
        return []
    return [{"key": str(kv.get("key")), "value": _text(kv.get("value") or {})}
            for kv in items if isinstance(kv, dict)]  # fmt: skip


def _enum(v: object, names: tuple[str, ...], prefix: str) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        name = v.upper().removeprefix(prefix)
        return names.index(name) if name in names else (int(v) if v.isdigit() else None)
    return None


def _span(s: dict) -> dict:
    s = {_snake_to_camel(k): v for k, v in s.items()}
    status = s.get("status") if isinstance(s.get("status"), dict) else {}
    return {
        "traceId": _hex_id(s.get("traceId")), "spanId": _hex_id(s.get("spanId")),
        "parentSpanId": _hex_id(s.get("parentSpanId")),
        "name": None if s.get("name") is None else str(s["name"]),
        "kind": _enum(s.get("kind"), KINDS, "SPAN_KIND_"),
        "startTimeUnixNano": None if s.get("startTimeUnixNano") is None
        else str(s["startTimeUnixNano"]),
        "endTimeUnixNano": None if s.get("endTimeUnixNano") is None
        else str(s["endTimeUnixNano"]),
        "attributes": _kvs(s.get("attributes")),
        "status": {"code": _enum(status.get("code"), STATUS, "STATUS_CODE_"),
                   "message": status.get("message")},
    }  # fmt: skip


def canonical(obj: object) -> dict:
    """Any OTLP JSON request (camelCase or snake_case keys, numbers or strings, hex or
    base64 ids) in the one form SCHEMA reads (raises ValueError: not a trace request)."""
    if not isinstance(obj, dict):
        raise ValueError("not an OTLP trace request (not a JSON object)")
    # protobuf's JSON form leaves an empty list out: an empty request holds no spans
    rs = obj.get("resourceSpans", obj.get("resource_spans", [] if not obj else None))
    if not isinstance(rs, list):
        raise ValueError("not an OTLP trace request (no resourceSpans list)")
    out = []
    for r in rs:
        if not isinstance(r, dict):
            continue
        r = {_snake_to_camel(k): v for k, v in r.items()}
        res = r.get("resource") if isinstance(r.get("resource"), dict) else {}
        scopes = []
        for ss in r.get("scopeSpans") or r.get("instrumentationLibrarySpans") or []:
            if not isinstance(ss, dict):
                continue
            ss = {_snake_to_camel(k): v for k, v in ss.items()}
            scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
            spans = [_span(s) for s in ss.get("spans") or [] if isinstance(s, dict)]
            scopes.append({"scope": {"name": scope.get("name"), "version": scope.get("version")},
                           "spans": spans})  # fmt: skip
        out.append({"resource": {"attributes": _kvs(res.get("attributes"))},
                    "scopeSpans": scopes})  # fmt: skip
    return {"resourceSpans": out}


# -- protobuf ------------------------------------------------------------------------------
def proto_requests(data: bytes) -> Iterator[tuple[int, dict | str]]:
    """(offset, request in the one form, or why it is not one) of a protobuf file: the
    file exporter's length-prefixed requests, else one bare request (raises NoProtobuf)."""
    try:
        from google.protobuf.json_format import MessageToDict
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
    except ImportError:
        raise NoProtobuf("OTLP protobuf needs the otel extra: pip install "
                         "'pd-forensics[otel]' (opentelemetry-proto)") from None  # fmt: skip

    def one(blob: bytes) -> dict | str:
        msg = ExportTraceServiceRequest()
        try:
            msg.ParseFromString(blob)
        except DecodeError as exc:
            return f"not an OTLP trace request ({exc})"
        try:
            return canonical(MessageToDict(msg))
        except ValueError as exc:
            return str(exc)

    if not _prefixed(data):
        yield 0, one(data) if len(data) <= MAX_REQUEST else _too_long(len(data))
        return
    at = 0
    while at < len(data):
        n = int.from_bytes(data[at : at + 4], "big") if at + 4 <= len(data) else -1
        if n < 0 or at + 4 + n > len(data):
            on = resync(data, at + 1)
            why = "a length prefix cut short" if n < 0 else f"a request of {n:,} bytes past the end"
            yield at, why + ("" if on is None else f" (read on from byte {on:,})")
            if on is None:
                return
            at = on
            continue
        yield at, one(data[at + 4 : at + 4 + n]) if n <= MAX_REQUEST else _too_long(n)
        at += 4 + n


def _too_long(n: int) -> str:
    return f"a request of {n:,} bytes, over the {MAX_REQUEST >> 20} MB one request may hold"


def resync(data: bytes, start: int) -> int | None:
    """The next offset from `start` where a length prefix holds a request that ends at the
    file's end or at another such prefix (a damaged prefix's requests after it kept)."""
    at = data.find(b"\x0a", start + 4)
    while at >= 0:
        p = at - 4
        n = int.from_bytes(data[p:at], "big")
        end = at + n
        fits = n > 0 and end <= len(data) and _proto_head(data[at : at + 32])
        if fits and (end == len(data) or framed_request(data[end : end + 36])):
            return p
        at = data.find(b"\x0a", at + 1)
    return None


def _prefixed(data: bytes) -> bool:
    """Whether the file is length-prefixed requests: the first prefix holds a request
    and the next one (or the end) follows it."""
    if len(data) < 5:
        return False
    n = int.from_bytes(data[:4], "big")
    return 0 < n <= len(data) - 4 and _proto_head(data[4 : 4 + n])


# -- Arrow ---------------------------------------------------------------------------------
def read_lines(blob: bytes, longest: int | None = None) -> pa.Table:
    """Lines (no blank ones) of OTLP JSON in the one form: a row a line (raises
    pyarrow.ArrowInvalid where a line does not read as SCHEMA). Blocks of 4 MB, or of the
    `longest` line, are parsed on Arrow's threads."""
    import pyarrow.json as pj

    size = max((longest if longest is not None else len(blob)) + 1, 4 << 20)
    return pj.read_json(
        io.BytesIO(blob),
        read_options=pj.ReadOptions(block_size=size, use_threads=True),
        parse_options=pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"),
    )


def needs_canonical(line: bytes) -> bool:
    """A line holding a value the Arrow reading would drop (arrays, maps, bytes) or keys
    it would not know (snake_case)."""
    return any(k in line for k in _NEEDS_CANON)


def _attr(col: str, keys: tuple[str, ...]) -> pl.Expr:
    """The first of `keys` among a list of {key, value} (text values)."""
    found = [
        pl.col(col)
        .list.eval(pl.element().filter(pl.element().struct.field("key") == k)
                   .struct.field("value"))
        .list.first()
        for k in keys
    ]  # fmt: skip
    return pl.coalesce(found) if len(found) > 1 else found[0]


def _texts(items: pl.Expr) -> pl.Expr:
    """A list of {key, value: AnyValue} as {key, value: text}."""
    v = pl.element().struct.field("value")
    text = pl.coalesce(
        v.struct.field("stringValue"), v.struct.field("intValue"),
        v.struct.field("doubleValue").cast(pl.String),
        v.struct.field("boolValue").cast(pl.String).str.to_lowercase(),
    )  # fmt: skip
    return items.list.eval(pl.struct(key=pl.element().struct.field("key"), value=text))


def spans(table: pa.Table, lines: list[int], host: str | None) -> Iterator[pl.DataFrame]:
    """A row a span of `table` (a row a line, `lines` their numbers), SLICE rows a frame:
    line, index (from 1 within its line), host, ts_us and the text the `otlp_span` pattern
    reads; `bad` says why a span is not one (no traceId, spanId or start), else null.

    The nesting is undone with Arrow's list_flatten, which shares the table's buffers (an
    explode copied every span's data once a level: 1.26 GB on a 100 MB line); each span
    finds its scope, resource and line through the parent indices."""
    import pyarrow.compute as pc

    rs = table.column("resourceSpans").combine_chunks()
    del table
    res_line = pl.Series(lines, dtype=pl.Int64).gather(pc.list_parent_indices(rs).to_numpy())
    res = pc.list_flatten(rs)
    about = (
        pl.from_arrow(pa.table({"r": res.field("resource")}))
        .select(rattrs=_texts(pl.col("r").struct.field("attributes")))
        .select(host=_attr("rattrs", HOST_KEYS), service=_attr("rattrs", ("service.name",)))
    )
    if host is not None:
        about = about.with_columns(host=pl.coalesce("host", pl.lit(host)))
    about = about.with_columns(line=res_line)
    scopes = res.field("scopeSpans")
    scope_res = pc.list_parent_indices(scopes).to_numpy()
    scope = pc.list_flatten(scopes)
    scope_name = pl.from_arrow(scope.field("scope").field("name"))
    spans_of = scope.field("spans")
    span_scope = pc.list_parent_indices(spans_of).to_numpy()
    flat = pc.list_flatten(spans_of)
    whose = about.select(pl.all().gather(pl.Series(scope_res[span_scope]))).with_columns(
        scope=scope_name.gather(span_scope)
    )
    whose = whose.with_columns(index=pl.int_range(1, pl.len() + 1).over("line"))
    for at in range(0, len(flat), SLICE):
        part = pl.from_arrow(pa.table({"s": flat.slice(at, SLICE)})).unnest("s")
        yield _rendered(pl.concat([whose.slice(at, SLICE), part], how="horizontal"))


def _rendered(flat: pl.DataFrame) -> pl.DataFrame:
    out = _records(flat)
    bad = (
        pl.when(pl.col("trace_id").is_null()).then(pl.lit("no traceId"))
        .when(pl.col("span_id").is_null()).then(pl.lit("no spanId"))
        .when(pl.col("start_us").is_null()).then(pl.lit("no readable startTimeUnixNano"))
        .when(pl.col("start_us") < MIN_START_US)
        .then(pl.lit("no readable start (startTimeUnixNano before 2000: unset, or wrong)"))
    )  # fmt: skip
    record = [c for c in out.columns if c not in ("line", "index", "host", "ts_us")]
    return out.select(
        "line", "index", "host", "ts_us",
        text=pl.struct(record).struct.json_encode(), bad=bad,
        backwards=pl.col("end_us") < pl.col("start_us"),
        odd_id=(pl.col("trace_id").str.len_bytes() != 32)
        | (pl.col("span_id").str.len_bytes() != 16)
        | (pl.col("parent_span_id").str.len_bytes() != 16),
    )  # fmt: skip


def _records(flat: pl.DataFrame) -> pl.DataFrame:
    """The spans as the `spans` table's fields (what the rendered line holds)."""
    start = pl.col("startTimeUnixNano").cast(pl.Int64, strict=False)
    end = pl.col("endTimeUnixNano").cast(pl.Int64, strict=False)
    room = _attr("attrs", ROOM_KEYS)
    room_int = (
        pl.when(room.str.starts_with("0x"))
        .then(room.str.slice(2).str.to_integer(base=16, strict=False))
        .otherwise(room.str.to_integer(base=10, strict=False))
    )
    xrid = _attr("attrs", X_REQUEST_ID_KEYS)
    return flat.with_columns(attrs=_texts(pl.col("attributes"))).select(
        "line", "index", host="host",
        ts_us=start // 1000,
        otlp_span=pl.col("name"), trace_id=pl.col("traceId"), span_id=pl.col("spanId"),
        parent_span_id=pl.col("parentSpanId").replace("", None), service="service",
        scope="scope",
        kind=pl.col("kind").replace_strict(range(len(KINDS)), KINDS, default=None,
                                           return_dtype=pl.String),
        start_us=start // 1000, end_us=end // 1000,
        status=pl.col("status").struct.field("code").fill_null(0)
        .replace_strict(range(len(STATUS)), STATUS, default=None, return_dtype=pl.String),
        status_message=pl.col("status").struct.field("message").replace("", None),
        rid=_attr("attrs", RID_KEYS),
        room=room_int.cast(pl.String),
        # a header captured as an attribute is a list of its values: the first
        x_request_id=xrid.str.strip_prefix('["').str.replace(r'".*$', ""),
        # SGLang's thread spans state their ranks (observability/trace.py: tp_rank, …)
        **{tag: _attr("attrs", (key,)) for tag, key in SPAN_RANKS.items()},
        attributes="attrs",
    )  # fmt: skip
