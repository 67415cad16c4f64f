"""TrackEvent packets encoded straight to protobuf's wire format.

At a trace's budget of 500 k events, building a message object per packet cost about
9 µs a packet (5 arguments), most of the trace's time; these few fields, encoded by hand
from the field numbers and types in the perfetto package's own descriptors, cost a third
of that (bench/README.md). Tests read every packet back with those protos.
"""

from __future__ import annotations

import struct
from functools import cache

import numpy as np
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

# protobuf field type -> wire type (varint 0, fixed64 1, length-delimited 2)
_WIRE = {1: 1, 3: 0, 4: 0, 5: 0, 6: 1, 8: 0, 9: 2, 11: 2, 12: 2, 13: 0, 14: 0}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# 14 bits at a time from tables: timestamps in ns are 9 bytes, and a byte-by-byte loop
# was most of the encoding's time
_SMALL = [_varint(n) for n in range(1 << 14)]
_MORE = [bytes(((x & 0x7F) | 0x80, ((x >> 7) & 0x7F) | 0x80)) for x in range(1 << 14)]


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64: two's complement, ten bytes
    if n < 16384:
        return _SMALL[n]
    out = b""
    while n >= 16384:
        out += _MORE[n & 0x3FFF]
        n >>= 14
    return out + _SMALL[n]


def varints(values: np.ndarray) -> list[bytes]:
    """Many unsigned varints at once (a trace's timestamps)."""
    if len(values) == 0:
        return []
    v = values.astype(np.uint64)
    groups = np.stack([(v >> np.uint64(7 * i)) & np.uint64(0x7F) for i in range(10)], 1)
    width = 1 + sum((v >= np.uint64(1 << (7 * k))).astype(np.int64) for k in range(1, 10))
    col = np.arange(10)
    groups = groups.astype(np.uint8) | np.where(col < (width - 1)[:, None], 0x80, 0).astype(
        np.uint8
    )
    flat = groups[col < width[:, None]].tobytes()
    ends = np.cumsum(width).tolist()
    starts = [0, *ends[:-1]]
    return [flat[a:b] for a, b in zip(starts, ends, strict=True)]


def _key(message, name: str) -> bytes:
    f = message.DESCRIPTOR.fields_by_name[name]
    return varint(f.number << 3 | _WIRE[f.type])


def _len(key: bytes, data: bytes) -> bytes:
    return key + varint(len(data)) + data


P_TS = _key(pb.TracePacket, "timestamp")
P_CLOCK = _key(pb.TracePacket, "timestamp_clock_id")
P_SEQ = _key(pb.TracePacket, "trusted_packet_sequence_id")
P_EVENT = _key(pb.TracePacket, "track_event")
E_TYPE = _key(pb.TrackEvent, "type")
E_TRACK = _key(pb.TrackEvent, "track_uuid")
E_NAME = _key(pb.TrackEvent, "name")
E_CAT = _key(pb.TrackEvent, "categories")
E_ARG = _key(pb.TrackEvent, "debug_annotations")
E_FLOW = _key(pb.TrackEvent, "flow_ids")
E_FLOW_END = _key(pb.TrackEvent, "terminating_flow_ids")
E_DOUBLE = _key(pb.TrackEvent, "double_counter_value")
A_NAME = _key(pb.DebugAnnotation, "name")
A_INT = _key(pb.DebugAnnotation, "int_value")
A_STR = _key(pb.DebugAnnotation, "string_value")
A_BOOL = _key(pb.DebugAnnotation, "bool_value")
A_DOUBLE = _key(pb.DebugAnnotation, "double_value")
FRAME = b"\n"  # Trace.packet: field 1, length-delimited
assert _key(pb.Trace, "packet") == FRAME


@cache
def _arg_name(name: str) -> bytes:
    return _len(A_NAME, name.encode())


def annotation(name: str, value: object) -> bytes:
    t = type(value)  # the length prefixes inlined: this runs for every argument
    if t is int:
        body = _arg_name(name) + A_INT + varint(value)  # type: ignore[arg-type]
    elif t is bool:
        body = _arg_name(name) + A_BOOL + (b"\x01" if value else b"\x00")
    elif t is float:
        body = _arg_name(name) + A_DOUBLE + struct.pack("<d", value)
    else:
        text = (value if t is str else str(value)).encode()  # type: ignore[union-attr]
        body = _arg_name(name) + A_STR + varint(len(text)) + text
    return E_ARG + varint(len(body)) + body


@cache
def head(kind: int, track: int) -> bytes:
    """An event's type and track: the same few bytes for every event of a track."""
    return E_TYPE + varint(kind) + E_TRACK + varint(track)


@cache
def categories(cats: str) -> bytes:
    return b"".join(_len(E_CAT, c.encode()) for c in cats.split(","))


@cache
def _clock_and_sequence(clock: int, seq: int) -> bytes:
    return P_CLOCK + varint(clock) + P_SEQ + varint(seq)


def packet(ts_varint: bytes, clock: int, seq: int, event: bytes) -> bytes:
    """One TracePacket holding a TrackEvent, framed as Trace's repeated field; its
    timestamp already encoded (`varints`)."""
    body = P_TS + ts_varint + _clock_and_sequence(clock, seq) + P_EVENT + varint(len(event))
    body += event
    return FRAME + varint(len(body)) + body


def slice_event(kind: int, track: int, name: str, cats: str, args: dict,
                flow_out: int | None, flow_in: int | None) -> bytes:  # fmt: skip
    text = name.encode()
    parts = [head(kind, track), E_NAME, varint(len(text)), text, categories(cats)]
    parts += [annotation(k, v) for k, v in args.items()]
    if flow_out is not None:
        parts.append(E_FLOW + struct.pack("<Q", flow_out))
    if flow_in is not None:
        parts.append(E_FLOW_END + struct.pack("<Q", flow_in))
    return b"".join(parts)


def counter_event(kind: int, track: int, value: float) -> bytes:
    return head(kind, track) + E_DOUBLE + struct.pack("<d", value)
