"""A timeline written as a Perfetto TrackEvent protobuf, a Chrome JSON trace, or an
archive that opens beside a torch profiler trace.

The protobuf is streamed packet by packet (the `perfetto` package's builder): a clock
snapshot first, then each track's descriptor, then the events in time order, every
packet on the realtime clock in ns. Slices of no duration are written as instants: a
begin and an end at one timestamp would sort either way.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np
import orjson

from ..errors import ForensicsError
from .timeline import Slice, Timeline

SEQUENCE = 1  # one writer: every packet on one sequence
TRACE_NAME = "incident.pftrace"
MANIFEST = "perfetto_manifest.json"


def metadata(tl: Timeline) -> dict:
    """What the trace says of itself: the clocks and what it left out."""
    return {
        "tool": "pd-forensics",
        "reference_host": tl.clocks.reference,
        "shifts_us": tl.clocks.shifts_us,
        "unshifted_hosts": tl.clocks.unshifted,
        "notes": tl.notes,
        "dropped": tl.dropped,
    }


class _Tracks:
    """uuids of the process track per host and of its child tracks, in first-use order."""

    def __init__(self, hosts: list[str]) -> None:
        self.pid = {h: i + 1 for i, h in enumerate(hosts)}
        self.uuid: dict[tuple[str, str | None], int] = {
            (h, None): i + 1 for i, h in enumerate(hosts)
        }
        self.counter: set[int] = set()

    def of(self, host: str, track: str, counter: bool = False) -> int:
        key = (host, track)
        if key not in self.uuid:
            self.uuid[key] = len(self.uuid) + 1
            if counter:
                self.counter.add(self.uuid[key])
        return self.uuid[key]


_ORDER = {t: 1_000_000 + i for i, t in enumerate(("decode steps", "transfers", "page writes",
                                                  "sglang events"))}  # fmt: skip


def _rank(track: str) -> int:
    """Tracks in a host: requests lanes by number, then steps, transfers, the rest."""
    if track.startswith("requests "):
        return int(track.split()[1])
    return _ORDER.get(track, 2_000_000)


def _ordered(tl: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ns, order, index) sorted: ends before begins at one timestamp (touching slices on
    one lane), then instants, then counters (order 3, index into the counters)."""
    start = np.fromiter((s.start_us for s in tl.slices), np.int64, len(tl.slices)) * 1000
    dur = np.fromiter((s.dur_us for s in tl.slices), np.int64, len(tl.slices)) * 1000
    idx = np.arange(len(tl.slices))
    timed = dur > 0
    ns = np.concatenate([
        start, (start + dur)[timed],
        np.fromiter((c.ts_us for c in tl.counters), np.int64, len(tl.counters)) * 1000,
    ])  # fmt: skip
    order = np.concatenate([np.where(timed, 1, 2), np.zeros(timed.sum(), np.int64),
                            np.full(len(tl.counters), 3)])  # fmt: skip
    index = np.concatenate([idx, idx[timed], np.arange(len(tl.counters))])
    by = np.lexsort((index, order, ns))
    return ns[by], order[by], index[by]


def write_proto(tl: Timeline, fh: IO[bytes]) -> int:
    """The TrackEvent protobuf; returns the packets written."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    builder = StreamingTraceProtoBuilder(fh)
    realtime = pb.BUILTIN_CLOCK_REALTIME
    ns, orders, indexes = _ordered(tl)
    t0 = int(ns[0]) if len(ns) else 0
    n = 0

    def put(p) -> None:
        nonlocal n
        builder.write_packet(p)
        n += 1

    snap = builder.create_packet()
    snap.clock_snapshot.primary_trace_clock = realtime
    for cid in (realtime, pb.BUILTIN_CLOCK_BOOTTIME):
        snap.clock_snapshot.clocks.add(clock_id=cid, timestamp=t0)
    snap.trusted_packet_sequence_id = SEQUENCE
    snap.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    put(snap)
    meta = builder.create_packet()
    meta.chrome_events.metadata.add(
        name="pd-forensics", json_value=orjson.dumps(metadata(tl)).decode()
    )
    put(meta)

    tracks = _Tracks(tl.hosts)
    for s in tl.slices:
        tracks.of(s.host, s.track)
    for c in tl.counters:
        tracks.of(c.host, c.track, counter=True)
    for (host, track), uuid in tracks.uuid.items():
        p = builder.create_packet()
        d = p.track_descriptor
        d.uuid = uuid
        if track is None:
            d.process.pid = tracks.pid[host]
            d.process.process_name = host
            d.child_ordering = pb.TrackDescriptor.EXPLICIT
        else:
            d.parent_uuid = tracks.uuid[(host, None)]
            d.name = track
            d.sibling_order_rank = _rank(track)
            if uuid in tracks.counter:
                d.counter.SetInParent()
        put(p)

    # The header packets above go through the builder; the events are encoded to the
    # same bytes by wire.py, whose hand encoding is 3x quicker (bench/README.md).
    from . import wire

    te = pb.TrackEvent
    kinds = {0: te.TYPE_SLICE_END, 1: te.TYPE_SLICE_BEGIN, 2: te.TYPE_INSTANT}
    uuid, write, pack = tracks.uuid, fh.write, wire.packet
    slices, counters = tl.slices, tl.counters
    for tsv, order, i in zip(wire.varints(ns), orders.tolist(), indexes.tolist(), strict=True):
        item = counters[i] if order == 3 else slices[i]
        track = uuid[(item.host, item.track)]
        if order == 3:
            ev = wire.counter_event(te.TYPE_COUNTER, track, item.value)
        elif order == 0:
            ev = wire.head(te.TYPE_SLICE_END, track)
        else:
            ev = wire.slice_event(kinds[order], track, item.name, item.category, item.args,
                                  item.flow_out, item.flow_in)  # fmt: skip
        write(pack(tsv, realtime, SEQUENCE, ev))
        n += 1
    return n


def json_events(tl: Timeline) -> Iterator[dict]:
    """Chrome JSON trace events: a process per host, a thread per track, times in µs."""
    tracks = _Tracks(tl.hosts)
    for host, pid in tracks.pid.items():
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": host}}
    named: set[int] = set()
    ns, orders, indexes = _ordered(tl)
    for t, order, i in zip(ns.tolist(), orders.tolist(), indexes.tolist(), strict=True):
        item = tl.counters[i] if order == 3 else tl.slices[i]
        host = item.host
        pid = tracks.pid[host]
        if order == 3:
            yield {"ph": "C", "name": item.track, "pid": pid, "ts": t / 1000,
                   "args": {"value": item.value}}  # fmt: skip
            continue
        if order == 0:
            continue  # complete events carry their duration
        s: Slice = item  # type: ignore[assignment]
        tid = tracks.of(host, s.track)
        if tid not in named:
            named.add(tid)
            yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                   "args": {"name": s.track}}  # fmt: skip
            yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                   "args": {"sort_index": _rank(s.track)}}  # fmt: skip
        ts = s.start_us
        base = {"name": s.name, "cat": s.category, "pid": pid, "tid": tid, "ts": ts}
        if order == 2 and s.flow_out is None and s.flow_in is None:
            yield base | {"ph": "i", "s": "t", "args": s.args}
        else:  # a flow binds to an enclosing slice: transfers are complete events of 0 µs
            yield base | {"ph": "X", "dur": s.dur_us, "args": s.args}
        if s.flow_out is not None:
            yield {"ph": "s", "id": s.flow_out, "name": "transfer", "cat": "transfer",
                   "pid": pid, "tid": tid, "ts": ts, "bp": "e"}  # fmt: skip
        if s.flow_in is not None:
            yield {"ph": "f", "id": s.flow_in, "name": "transfer", "cat": "transfer",
                   "pid": pid, "tid": tid, "ts": ts, "bp": "e"}  # fmt: skip


def write_json(tl: Timeline, fh: IO[bytes]) -> int:
    """The Chrome JSON trace, written event by event; returns the events written."""
    fh.write(b'{"displayTimeUnit":"ms","metadata":')
    fh.write(orjson.dumps(metadata(tl)))
    fh.write(b',"traceEvents":[')
    n = 0
    for ev in json_events(tl):
        fh.write(b"," if n else b"")
        fh.write(orjson.dumps(ev))
        n += 1
    fh.write(b"]}\n")
    return n


def profile_origin(profile: Path) -> tuple[int, str | None]:
    """A torch profiler (Kineto) trace's origin on its host's wall clock (its events' `ts`
    are µs after `baseTimeNanoseconds`) and the host it names, if any."""
    try:
        doc = orjson.loads(profile.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise ForensicsError(f"{profile}: not a readable JSON trace ({e})") from None
    base = doc.get("baseTimeNanoseconds") if isinstance(doc, dict) else None
    if not isinstance(base, int) or base <= 0:
        raise ForensicsError(
            f"{profile}: no baseTimeNanoseconds: not a torch profiler / Kineto trace, or one "
            "exported without it; its clock cannot be placed"
        )
    host = doc.get("host_name")
    return base, host if isinstance(host, str) else None


def manifest(trace_name: str, profile_name: str, base_ns: int, shift_us: int) -> dict:
    """Perfetto's trace manifest: the merged timeline is the incident's realtime clock;
    the profile's time 0 is `baseTimeNanoseconds` on its host, shifted as that host is."""
    return {
        "perfetto_manifest": {
            "version": 1,
            "trace_time": {"clock": "REALTIME", "file": trace_name},
            "files": [
                {"path": trace_name},
                {"path": profile_name,
                 "clocks": {"ts": 0, "is": {"clock": "REALTIME", "file": trace_name,
                                            "ts": base_ns + shift_us * 1000}}},
            ],
        }
    }  # fmt: skip


def write_archive(
    out: Path, trace_bytes: bytes, trace_name: str, profile: Path, shift_us: int, as_zip: bool
) -> None:
    """A TAR (or ZIP) of the manifest, the trace and the profile; `shift_us` puts the
    profile's host on the reference clock."""
    base, _ = profile_origin(profile)
    name = "profile-" + profile.name
    man = orjson.dumps(manifest(trace_name, name, base, shift_us), option=orjson.OPT_INDENT_2)
    members = [(MANIFEST, man), (trace_name, trace_bytes), (name, profile.read_bytes())]
    if as_zip:
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
            for n, data in members:
                z.writestr(n, data)
        return
    with tarfile.open(out, "w") as t:
        for n, data in members:
            info = tarfile.TarInfo(n)
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
