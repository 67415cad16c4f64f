"""`forensics trace`: the trace read back with the protos the perfetto package ships and
checked against the database, with Perfetto's import rules (slices nest on each track,
each flow has one start and one end)."""

from __future__ import annotations

import itertools
import random
import tarfile
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import forensics
from forensics.artifacts.timeline import pack_lanes
from forensics.artifacts.trace import trace
from tests.helpers import cli

TE = pb.TrackEvent


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("demo")
    forensics.demo(d)
    return d


def _read(path: Path) -> list:
    t = pb.Trace()
    t.ParseFromString(path.read_bytes())
    return list(t.packet)


def _q(db: Path, sql: str) -> list[tuple]:
    return forensics.query_rows(sql, db)[1]


class Parsed:
    """The trace as Perfetto's importer would see it: tracks, slices, instants, flows."""

    def __init__(self, packets: list) -> None:
        self.packets = packets
        self.tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets
                       if p.HasField("track_descriptor")}  # fmt: skip
        self.slices: list[tuple[int, int, int, object]] = []  # track, start, end, begin event
        self.instants: list[tuple[int, int, object]] = []
        self.counters: list[tuple[int, int, float]] = []
        self.flow_starts: Counter = Counter()
        self.flow_ends: Counter = Counter()
        open_: dict[int, list] = defaultdict(list)
        self.nest_errors: list[str] = []
        for p in packets:
            if not p.HasField("track_event"):
                continue
            e = p.track_event
            self.flow_starts.update(e.flow_ids)
            self.flow_ends.update(e.terminating_flow_ids)
            if e.type == TE.TYPE_SLICE_BEGIN:
                stack = open_[e.track_uuid]
                open_[e.track_uuid].append((p.timestamp, e))
            elif e.type == TE.TYPE_SLICE_END:
                stack = open_[e.track_uuid]
                if not stack:
                    self.nest_errors.append(f"end without begin on track {e.track_uuid}")
                    continue
                start, begin = stack.pop()
                self.slices.append((e.track_uuid, start, p.timestamp, begin))
            elif e.type == TE.TYPE_INSTANT:
                self.instants.append((e.track_uuid, p.timestamp, e))
            elif e.type == TE.TYPE_COUNTER:
                self.counters.append((e.track_uuid, p.timestamp, e.double_counter_value))
        self.nest_errors += [f"unclosed slice on {t}" for t, s in open_.items() if s]

    def host_of(self, uuid: int) -> str:
        d = self.tracks[uuid]
        while d.HasField("parent_uuid"):
            d = self.tracks[d.parent_uuid]
        return d.process.process_name

    def name_of(self, uuid: int) -> str:
        return self.tracks[uuid].name

    def args(self, e) -> dict:
        out = {}
        for a in e.debug_annotations:
            out[a.name] = getattr(a, a.WhichOneof("value"))
        return out


@pytest.fixture(scope="module")
def parsed(demo: Path) -> tuple[Parsed, object]:
    out = demo / "incident.pftrace"
    res = trace(demo / "forensics.duckdb", out)
    return Parsed(_read(out)), res


def test_clock_snapshot_first_and_every_packet_on_realtime(parsed) -> None:
    p, _ = parsed
    first = p.packets[0]
    assert first.HasField("clock_snapshot")
    assert first.clock_snapshot.primary_trace_clock == pb.BUILTIN_CLOCK_REALTIME
    timed = [x for x in p.packets if x.HasField("track_event")]
    assert timed and all(x.timestamp_clock_id == pb.BUILTIN_CLOCK_REALTIME for x in timed)
    # realtime in ns: the demo's incident is in November 2026
    assert all(1.79e18 < x.timestamp < 1.80e18 for x in timed)


def test_one_process_per_host_and_slices_nest(parsed, demo: Path) -> None:
    p, _ = parsed
    procs = sorted(d.process.process_name for d in p.tracks.values() if d.HasField("process"))
    hosts = sorted(h for (h,) in _q(demo / "forensics.duckdb", "SELECT DISTINCT host FROM entries"))
    assert procs == hosts
    assert p.nest_errors == []
    by_track = defaultdict(list)
    for track, start, end, _ in p.slices:
        by_track[track].append((start, end))
    for spans in by_track.values():
        spans.sort()
        for (_s0, e0), (s1, e1) in itertools.pairwise(spans):
            assert s1 >= e0 or e1 <= e0, "slices on one track overlap without nesting"


def test_requests_match_the_results(parsed, demo: Path) -> None:
    p, _ = parsed
    db = demo / "forensics.duckdb"
    reqs = [(t, s, e, b) for t, s, e, b in p.slices if "request" in b.categories]
    reqs += [(t, ts, ts, e) for t, ts, e in p.instants if "request" in e.categories]
    ((n, bad),) = _q(db, "SELECT count(*), count(*) FILTER (corrupted) FROM results")
    assert len(reqs) == n
    assert sum("corrupted" in b.categories for *_, b in reqs) == bad
    assert all(b.name.startswith("CORRUPTED") == ("corrupted" in b.categories) for *_, b in reqs)
    rid_room = dict(_q(db, "SELECT rid, room::VARCHAR FROM requests"))
    spans = {
        r: (a, b)
        for r, a, b in _q(
            db,
            """SELECT rid, min(ts_us) FILTER (event='Receive'),
             max(ts_us) FILTER (event='Finish') FROM rid_rooms WHERE host='decode-0' GROUP BY rid""",
        )
    }
    for track, start, end, b in reqs:
        a = p.args(b)
        assert a["room"] == rid_room[a["rid"]]  # room ids whole, as text
        assert p.host_of(track) == "decode-0"  # decode logged Receive / Finish for all
        assert (a["raw_start_us"], a["raw_end_us"]) == spans[a["rid"]]
        assert (start, end) == (a["raw_start_us"] * 1000, a["raw_end_us"] * 1000)  # reference


def test_steps_page_writes_and_events_match_the_tables(parsed, demo: Path) -> None:
    p, _ = parsed
    db = demo / "forensics.duckdb"
    steps = [b for *_, b in p.slices if "step" in b.categories]
    steps += [e for _, _, e in p.instants if "step" in e.categories]
    (n_steps,), = _q(db, "SELECT count(*) FROM (SELECT DISTINCT host, step FROM steps UNION "
                         "SELECT DISTINCT host, step FROM canary)")  # fmt: skip
    assert len(steps) == n_steps
    writes = [(t, e) for t, _, e in p.instants if "canary" in e.categories]
    rows = _q(db, "SELECT step, layer, n_unexpected FROM canary WHERE n_unexpected > 0")
    assert sorted((p.args(e)["step"], p.args(e)["layer"], p.args(e)["unexpected"])
                  for _, e in writes) == sorted(rows)  # fmt: skip
    assert all(p.name_of(t) == "page writes" for t, _ in writes)
    events = [e for _, _, e in p.instants if "sglang" in e.categories]
    ((n_ev,),) = _q(db, "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM transfers)")
    assert len(events) == n_ev > 0
    assert {e.name for e in events} >= {k for (k,) in _q(db, "SELECT DISTINCT kind FROM events")}


def test_transfer_flows_join_send_to_receive(parsed, demo: Path) -> None:
    p, _ = parsed
    assert p.flow_starts and all(n == 1 for n in p.flow_starts.values())
    assert p.flow_ends == p.flow_starts  # each id: one start and one end
    ((n,),) = _q(
        demo / "forensics.duckdb",
        """SELECT count(*) FROM (SELECT room FROM rooms
        GROUP BY run, room HAVING min(src_ts_us) IS NOT NULL AND min(dst_ts_us) IS NOT NULL)""",
    )
    assert len(p.flow_starts) == n
    sends = {e.flow_ids[0]: p.host_of(t) for t, _, e in p.instants if e.flow_ids}
    recvs = {e.terminating_flow_ids[0]: p.host_of(t) for t, _, e in p.instants
             if e.terminating_flow_ids}  # fmt: skip
    assert set(sends.values()) == {"prefill-0"} and set(recvs.values()) == {"decode-0"}


def test_prefill_is_shifted_by_the_skew_midpoint(parsed, demo: Path) -> None:
    p, res = parsed
    ((upper, lower),) = _q(demo / "forensics.duckdb", "SELECT upper_us, lower_us FROM skew")
    assert res.reference == "decode-0"
    assert res.shifts_us == {"decode-0": 0, "prefill-0": round((upper + lower) / 2)}
    for t, ts, e in p.instants:
        a = p.args(e)
        if "raw_ts_us" in a:
            assert ts == (a["raw_ts_us"] + res.shifts_us[p.host_of(t)]) * 1000
    meta = next(x for x in p.packets if x.HasField("chrome_events"))
    doc = orjson.loads(meta.chrome_events.metadata[0].json_value)
    assert doc["shifts_us"] == res.shifts_us and doc["reference_host"] == "decode-0"


def test_decode_load_counters(parsed, demo: Path) -> None:
    p, _ = parsed
    rows = _q(demo / "forensics.duckdb", "SELECT ts_us, running_req FROM batches "
              "WHERE phase = 'Decode' AND running_req IS NOT NULL")  # fmt: skip
    running = [(ts, v) for t, ts, v in p.counters if p.name_of(t) == "#running-req"]
    assert sorted(running) == sorted((ts * 1000, float(v)) for ts, v in rows)
    usage_rows = _q(demo / "forensics.duckdb", "SELECT ts_us, token_usage FROM batches "
                    "WHERE phase = 'Decode' AND token_usage IS NOT NULL")  # fmt: skip
    usage = [(ts, v) for t, ts, v in p.counters if p.name_of(t) == "token usage"]
    assert usage and sorted(usage) == sorted((ts * 1000, float(v)) for ts, v in usage_rows)
    assert {p.host_of(t) for t, _, _ in p.counters} == {"decode-0"}
    assert all(p.tracks[t].HasField("counter") for t, _, _ in p.counters)


def test_budget_aggregates_page_writes_and_says_so(demo: Path, tmp_path: Path) -> None:
    db = demo / "forensics.duckdb"
    full = trace(db, tmp_path / "full.pftrace")
    total = full.slices + full.instants + full.counters
    ((n_writes,),) = _q(db, "SELECT count(*) FROM canary WHERE n_unexpected > 0")
    res = trace(db, tmp_path / "small.pftrace", max_events=total - 1)
    assert res.slices + res.instants + res.counters == total - 1
    assert any("aggregated" in n for n in res.notes)
    p = Parsed(_read(tmp_path / "small.pftrace"))
    writes = [e for _, _, e in p.instants if "canary" in e.categories]
    ((n_steps,),) = _q(db, "SELECT count(DISTINCT (host, step)) FROM canary WHERE n_unexpected > 0")
    assert len(writes) == min(n_steps, total - 1 - (total - n_writes))
    assert writes and all(p.args(e)["aggregated"] for e in writes)
    tiny = trace(db, tmp_path / "tiny.pftrace", max_events=10)
    assert tiny.slices + tiny.instants + tiny.counters == 10 and any(
        "left out" in n for n in tiny.notes
    )


def test_json_trace_carries_the_same_events(demo: Path, parsed, tmp_path: Path) -> None:
    _, proto = parsed
    res = trace(demo / "forensics.duckdb", tmp_path / "t.json", format="json")
    doc = orjson.loads((tmp_path / "t.json").read_bytes())
    ev = doc["traceEvents"]
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert names == {"decode-0", "prefill-0"}
    complete = [e for e in ev if e["ph"] == "X" and e["dur"] > 0]
    assert len(complete) == res.slices == proto.slices
    starts = Counter(e["id"] for e in ev if e["ph"] == "s")
    assert starts == Counter(e["id"] for e in ev if e["ph"] == "f") and len(starts) == res.flows
    assert doc["metadata"]["shifts_us"] == proto.shifts_us


def test_archive_with_a_torch_profile_on_the_reference_clock(demo: Path, tmp_path: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.ones(8, 8)
        (x @ x).sum()
    real = tmp_path / "real.pt.trace.json"
    prof.export_chrome_trace(str(real))
    base = orjson.loads(real.read_bytes())["baseTimeNanoseconds"]
    out = tmp_path / "incident.tar"
    res = trace(demo / "forensics.duckdb", out, profile=real, profile_host="prefill-0")
    with tarfile.open(out) as t:
        assert sorted(t.getnames()) == ["incident.pftrace", "perfetto_manifest.json",
                                        "profile-real.pt.trace.json"]  # fmt: skip
        man = orjson.loads(t.extractfile("perfetto_manifest.json").read())["perfetto_manifest"]
        assert t.extractfile("profile-real.pt.trace.json").read() == real.read_bytes()
        Parsed([*pb.Trace.FromString(t.extractfile("incident.pftrace").read()).packet])
    assert man["version"] == 1 and man["trace_time"]["clock"] == "REALTIME"
    clocks = man["files"][1]["clocks"]
    assert clocks["ts"] == 0
    assert clocks["is"]["ts"] == base + res.shifts_us["prefill-0"] * 1000
    # the demo's own profile names its host: decode-0, the reference, unshifted
    demo_profile = demo / "decode-0.pt.trace.json"
    res = trace(demo / "forensics.duckdb", tmp_path / "d.zip", profile=demo_profile)
    assert res.profile_host == "decode-0"
    import zipfile

    with zipfile.ZipFile(tmp_path / "d.zip") as z:
        man = orjson.loads(z.read("perfetto_manifest.json"))["perfetto_manifest"]
    prof_doc = orjson.loads(demo_profile.read_bytes())
    assert man["files"][1]["clocks"]["is"]["ts"] == prof_doc["baseTimeNanoseconds"]
    # each profiled forward pass ends where decode logged its step record
    steps = {s for (s,) in _q(demo / "forensics.duckdb", "SELECT ts_us FROM steps")}
    ends = [round(prof_doc["baseTimeNanoseconds"] / 1000 + e["ts"] + e["dur"])
            for e in prof_doc["traceEvents"] if e["ph"] == "X"]  # fmt: skip
    assert ends and set(ends) <= steps


def test_stock_incident_lists_hosts_left_on_their_clocks(tmp_path: Path) -> None:
    forensics.demo(tmp_path / "stock", stock=True)
    res = trace(tmp_path / "stock" / "forensics.duckdb", tmp_path / "s.pftrace")
    assert res.unshifted and res.reference not in res.unshifted
    assert any("left on their own clocks" in n for n in res.notes)
    assert res.slices > 0  # requests from Receive / Finish lines and the harness


@pytest.mark.parametrize("seed", range(20))
def test_lanes_are_as_few_as_the_deepest_overlap(seed: int) -> None:
    rng = random.Random(seed)
    spans = [(s, s + rng.randint(0, 50)) for s in (rng.randint(0, 200) for _ in range(60))]
    lanes = pack_lanes(spans)
    for lane in set(lanes):
        mine = sorted(sp for sp, ln in zip(spans, lanes, strict=True) if ln == lane)
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(mine))
    # fewest possible: the most spans open at one instant (touching ones do not overlap)
    depth = max(sum(a <= t < b or a == b == t for a, b in spans) for t in range(260))
    assert len(set(lanes)) == depth


def test_cli_writes_the_trace_and_refuses_bad_arguments(demo: Path, tmp_path: Path) -> None:
    db = str(demo / "forensics.duckdb")
    r = cli("trace", "--db", db, "--out", str(tmp_path / "c.pftrace"), "--json")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["flows"] > 0
    assert (tmp_path / "c.pftrace").stat().st_mode & 0o777 == 0o644 & ~_umask()
    for args, said in [
        (["--format", "svg"], b"unknown trace format"),
        (["--reference", "nohost"], b"no host 'nohost'"),
        (["--profile", str(demo / "results.jsonl"), "--out", str(tmp_path / "x.tar")],
         b"not a readable JSON trace"),
    ]:  # fmt: skip
        r = cli("trace", "--db", db, *args)
        assert r.returncode != 0 and said in r.stderr, r.stderr
        assert b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1
    assert not (tmp_path / "x.tar").exists()


def _umask() -> int:
    import os

    m = os.umask(0)
    os.umask(m)
    return m


def test_the_library_names_trace_and_bundle() -> None:
    from forensics.artifacts.bundle import bundle

    assert forensics.trace is trace and forensics.bundle is bundle
    assert {"trace", "bundle"} <= set(forensics.__all__)
