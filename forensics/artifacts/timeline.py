"""An incident as a timeline: what `forensics trace` draws, independent of the file format.

One process per host. Requests become slices packed into the fewest lanes that keep them
apart (a track's slices must nest; requests overlap freely, so lanes never share time).
Decode steps and ingested OpenTelemetry spans are slices on their host, unexpected page
writes and SGLang's events are instants, each room's transfer is a flow from prefill's
send to decode's receive, decode load is counters. Times are put on the reference host's
clock by the midpoints of `skew`'s bounds; raw times stay in the arguments.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb

from ..analyses.runs import Runs, run_filter
from ..errors import ForensicsError
from ..plural import counted
from ..scope import Scope

CLIENT = "client (reproducer)"  # the harness's clock, not a server's
MAX_EVENTS = 500_000
STEP_CAP_US = 1_000_000  # a step slice ends at the next step, or this long after it starts
PAGES_SHOWN = 64  # pages listed in an instant's arguments; the count is always whole


@dataclass
class Slice:
    host: str
    track: str  # the track's name within its host ("requests 3", "decode steps")
    name: str
    category: str
    start_us: int  # on the reference clock
    dur_us: int
    args: dict = field(default_factory=dict)
    flow_out: int | None = None  # a flow starts here (its id)
    flow_in: int | None = None  # a flow ends here


@dataclass
class Counter:
    host: str
    track: str
    ts_us: int
    value: float


@dataclass
class Clocks:
    reference: str | None
    shifts_us: dict[str, int]  # added to a host's times to put them on the reference's
    unshifted: list[str]  # hosts no two-sided bound ties to the reference: left as they are
    hosts: list[str] = field(default_factory=list)  # every host the incident's entries name

    def shift(self, host: str | None) -> int:
        return self.shifts_us.get(host or "", 0)


@dataclass
class Timeline:
    hosts: list[str]  # process order: the reference first, then decode, prefill, others
    slices: list[Slice]  # instants are slices of no duration
    counters: list[Counter]
    clocks: Clocks
    notes: list[str]  # what the trace left out or aggregated, in words
    dropped: dict[str, int]  # events left out for the budget, per kind

    @property
    def flows(self) -> int:
        return sum(s.flow_out is not None for s in self.slices)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def decode_hosts(con: duckdb.DuckDBPyConnection, where: str, params: list) -> list[str]:
    sql = f"""SELECT DISTINCT host FROM (
        SELECT host, run FROM steps UNION ALL SELECT host, run FROM canary
        UNION ALL SELECT host, run FROM checksums WHERE side = 'dst'
        UNION ALL SELECT host, run FROM batches WHERE phase = 'Decode')
        WHERE host IS NOT NULL AND {where} ORDER BY host"""
    return [r[0] for r in con.execute(sql, params).fetchall()]


def clocks(con: duckdb.DuckDBPyConnection, runs: Runs, reference: str | None) -> Clocks:
    """Shifts onto the reference host's clock along host pairs with both bounds."""
    where, params = run_filter(runs)
    src_where, _ = run_filter(runs, "s.run")
    hosts = [
        r[0]
        for r in con.execute(
            f"""SELECT DISTINCT e.host FROM entries e JOIN sources s USING (source_id)
                WHERE e.host IS NOT NULL AND {src_where} ORDER BY 1""",
            params,
        ).fetchall()
    ]
    decode = decode_hosts(con, where, params)
    if reference is None:
        reference = decode[0] if decode else (hosts[0] if hosts else None)
    elif reference not in hosts:
        raise ForensicsError(
            f"no host {reference!r} in the incident; hosts: {', '.join(hosts) or 'none'}"
        )
    # dst clock − src clock lies between the bounds: the midpoint is the best guess
    edges: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for src, dst, upper, lower in con.execute(
        f"""SELECT src_host, dst_host, min(upper_us), max(lower_us) FROM skew
            WHERE {where} AND src_host IS NOT NULL AND dst_host IS NOT NULL
            AND upper_us IS NOT NULL AND lower_us IS NOT NULL GROUP BY ALL""",
        params,
    ).fetchall():
        mid = (upper + lower) / 2  # dst's reading − src's reading of one instant
        edges[dst].append((src, mid))  # a src time + mid is on dst's clock
        edges[src].append((dst, -mid))
    shifts: dict[str, float] = {}
    if reference is not None:
        shifts[reference] = 0.0
        todo = [reference]
        while todo:
            h = todo.pop()
            for other, mid in edges[h]:
                if other not in shifts:
                    shifts[other] = shifts[h] + mid
                    todo.append(other)
    left = [h for h in hosts if h not in shifts]
    return Clocks(reference, {h: round(s) for h, s in shifts.items()}, left, hosts)


def pack_lanes(intervals: list[tuple[int, int]]) -> list[int]:
    """The lane of each (start, end): the fewest lanes in which no two overlap (greedy by
    start is optimal for intervals). Touching intervals may share a lane."""
    order = sorted(range(len(intervals)), key=lambda i: intervals[i])
    free: list[tuple[int, int]] = []  # (end, lane) of the lanes in use
    lanes = [0] * len(intervals)
    count = 0
    for i in order:
        start, end = intervals[i]
        if free and free[0][0] <= start:
            _, lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lanes[i] = lane
        heapq.heappush(free, (max(end, start), lane))
    return lanes


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit
        self.dropped: dict[str, int] = {}

    def take(self, kind: str, items: list) -> list:
        return self.took(kind, items[: max(self.left, 0)], len(items))

    def took(self, kind: str, kept: list, total: int) -> list:
        """`kept` (fetched within what is left) of `total` such events."""
        self.left -= len(kept)
        if len(kept) < total:
            self.dropped[kind] = self.dropped.get(kind, 0) + total - len(kept)
        return kept


def build(s: Scope, reference: str | None = None, max_events: int = MAX_EVENTS) -> Timeline:
    con, runs = s.con, s.runs
    where, params = run_filter(runs)
    clk = clocks(con, runs, reference)
    budget = _Budget(max_events)
    notes: list[str] = []

    def on_ref(host: str | None, ts_us: int) -> int:
        return ts_us + clk.shift(host)

    slices: list[Slice] = []
    slices += budget.take("requests", _requests(con, where, params, clk))
    slices += budget.take("transfers", _transfers(con, where, params, on_ref))
    slices += budget.take("sglang events", _events(con, where, params, on_ref))
    slices += budget.take("spans", _spans(con, where, params, on_ref))
    counters = budget.take("counters", _counters(con, where, params, on_ref))
    slices += budget.took("decode steps", *_steps(con, where, params, on_ref, budget.left))
    writes, n = _page_writes(con, where, params, on_ref, False, budget.left)
    if n > budget.left:
        writes, steps = _page_writes(con, where, params, on_ref, True, budget.left)
        notes.append(
            f"{n:,} unexpected page-write instants exceed the budget of {max_events:,} "
            f"events: aggregated to {steps:,}, one per decode step and host"
        )
        n = steps
    slices += budget.took("page writes", writes, n)
    for kind, n in budget.dropped.items():
        notes.append(f"{n:,} {kind} left out: over the budget of {max_events:,} events")
    if untimed := s.untimed():
        notes.append(f"{counted(untimed, 'entry', 'entries')} with no time left out (none of "
                     "their own, none before them in their source)")  # fmt: skip
    if clk.unshifted:
        notes.append(
            "left on their own clocks (no two-sided skew bound to the reference): "
            + ", ".join(clk.unshifted)
        )
    hosts = sorted(
        set(clk.hosts) | {s.host for s in slices} | {c.host for c in counters},
        key=lambda h: (h != clk.reference, h == CLIENT, h),
    )
    return Timeline(hosts, slices, counters, clk, notes, budget.dropped)


def _requests(con, where: str, params: list, clk: Clocks) -> list[Slice]:
    """Harness results, on decode's Receive→Finish where decode logged both, else on the
    client's clock; requests decode logged that no result names are drawn too."""
    decode = set(decode_hosts(con, where, params))
    spans = {}
    for r in _rows(
        con,
        f"""SELECT run, rid, host, min(ts_us) FILTER (event = 'Receive') AS recv_us,
                   max(ts_us) FILTER (event = 'Finish') AS finish_us
            FROM rid_rooms WHERE {where} AND rid IS NOT NULL GROUP BY ALL""",
        params,
    ):
        if r["host"] in decode and r["recv_us"] is not None and r["finish_us"] is not None:
            spans.setdefault((r["run"], r["rid"]), r)
    rows = _rows(
        con,
        f"""SELECT run, session, round, rid, room, verdict, status, corrupted, reason,
                   start_us, end_us FROM requests WHERE {where}
            ORDER BY start_us NULLS LAST, session, round""",
        params,
    )
    seen = {(r["run"], r["rid"]) for r in rows}
    for run, rid in sorted(spans, key=lambda k: spans[k]["recv_us"]):
        if (run, rid) not in seen:
            rows.append({"run": run, "rid": rid, "session": None, "round": None, "room": None,
                         "verdict": None, "status": None, "corrupted": None, "reason": None,
                         "start_us": None, "end_us": None})  # fmt: skip
    placed: list[tuple[str, int, int, dict]] = []
    for r in rows:
        span = spans.get((r["run"], r["rid"]))
        args = {k: r[k] for k in ("run", "session", "round", "rid", "status", "reason",
                                  "verdict") if r[k] is not None}  # fmt: skip
        if r["room"] is not None:
            args["room"] = str(r["room"])
        if span is not None:
            host, t0, t1 = span["host"], span["recv_us"], span["finish_us"]
            args |= {"clock": f"{host} (decode's Receive / Finish)", "raw_start_us": t0,
                     "raw_end_us": t1}  # fmt: skip
            t0, t1 = t0 + clk.shift(host), t1 + clk.shift(host)
        elif r["start_us"] is not None:
            host, t0 = CLIENT, r["start_us"]
            t1 = r["end_us"] if r["end_us"] is not None else t0
            args |= {"clock": "client (the harness's)", "raw_start_us": t0, "raw_end_us": t1}
        else:
            continue
        if r["start_us"] is not None and span is not None:
            args["harness_start_us"], args["harness_end_us"] = r["start_us"], r["end_us"]
        placed.append((host, t0, max(t1, t0), args | {"corrupted": bool(r["corrupted"])}))
    out: list[Slice] = []
    by_host: dict[str, list[int]] = defaultdict(list)
    for i, (host, *_) in enumerate(placed):
        by_host[host].append(i)
    for host, idx in by_host.items():
        lanes = pack_lanes([(placed[i][1], placed[i][2]) for i in idx])
        for i, lane in zip(idx, lanes, strict=True):
            _, t0, t1, args = placed[i]
            bad = args["corrupted"]
            session, rnd = args.get("session"), args.get("round")
            label = f"request {session}/{rnd}" if session is not None else f"request {args['rid']}"
            out.append(
                Slice(
                    host,
                    f"requests {lane}",
                    f"{'CORRUPTED ' if bad else ''}{label}",
                    "request,corrupted" if bad else "request",
                    t0,
                    t1 - t0,
                    args,
                )
            )
    return out


def _transfers(con, where: str, params: list, on_ref) -> list[Slice]:
    """Each room: prefill's send and decode's receive, a flow between them."""
    out: list[Slice] = []
    rows = _rows(
        con,
        f"""SELECT run, room, any_value(rid) AS rid, min(src_ts_us) AS src_us,
                   min(dst_ts_us) AS dst_us, any_value(src_host) AS src_host,
                   any_value(dst_host) AS dst_host,
                   arg_max(verdict, CASE verdict WHEN 'match' THEN 0 ELSE 1 END) AS verdict
            FROM rooms WHERE {where} GROUP BY run, room ORDER BY min(src_ts_us), room""",
        params,
    )
    flow = 0
    for r in rows:
        args = {"run": r["run"], "room": str(r["room"]), "rid": r["rid"], "verdict": r["verdict"]}
        bad = r["verdict"] != "match"
        cat = "transfer,bad" if bad else "transfer"
        both = (
            r["src_us"] is not None and r["dst_us"] is not None and r["src_host"] != r["dst_host"]
        )
        fid = None
        if both:
            flow += 1
            fid = flow
        for side, verb in (("src", "send"), ("dst", "receive")):
            host, ts = r[f"{side}_host"], r[f"{side}_us"]
            if ts is None or host is None:
                continue
            flows = {"flow_out": fid} if side == "src" else {"flow_in": fid}
            out.append(Slice(host, "transfers", f"{verb} room {r['room']}", cat,
                             on_ref(host, ts), 0, args | {"raw_ts_us": ts}, **flows))  # fmt: skip
    return out


def _events(con, where: str, params: list, on_ref) -> list[Slice]:
    """SGLang's own events (aborts, retractions, tracebacks, …) and transfer failures."""
    rows = _rows(
        con,
        f"""SELECT host, ts_us, kind AS name, rid, room, detail, run FROM events
            WHERE {where} AND ts_us IS NOT NULL AND host IS NOT NULL
            UNION ALL
            SELECT host, ts_us, 'transfer: ' || coalesce(exception, pattern) AS name, rid, room,
                   reason AS detail, run FROM transfers
            WHERE {where} AND ts_us IS NOT NULL AND host IS NOT NULL
            ORDER BY ts_us""",
        params + params,
    )
    out = []
    for r in rows:
        args = {k: r[k] for k in ("run", "rid", "detail") if r[k] is not None}
        if r["room"] is not None:
            args["room"] = str(r["room"])
        out.append(
            Slice(
                r["host"],
                "sglang events",
                r["name"],
                "sglang",
                on_ref(r["host"], r["ts_us"]),
                0,
                args | {"raw_ts_us": r["ts_us"]},
            )
        )
    return out


def _spans(con, where: str, params: list, on_ref) -> list[Slice]:
    """The ingested OpenTelemetry spans on their hosts, packed into lanes per host (spans
    of different traces overlap freely; a lane's slices never do)."""
    rows = _rows(
        con,
        f"""SELECT host, start_us, end_us, name, trace_id, span_id, parent_span_id, service,
                   status, status_message, rid, room, x_request_id, run FROM spans
            WHERE {where} AND host IS NOT NULL AND start_us IS NOT NULL
            ORDER BY host, start_us, span_id""",
        params,
    )
    out: list[Slice] = []
    by_host: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_host[r["host"]].append(r)
    for host, spans in by_host.items():
        ends = [max(r["end_us"] or r["start_us"], r["start_us"]) for r in spans]
        lanes = pack_lanes([(r["start_us"], e) for r, e in zip(spans, ends, strict=True)])
        for r, end, lane in zip(spans, ends, lanes, strict=True):
            args = {k: r[k] for k in ("run", "trace_id", "span_id", "parent_span_id", "service",
                                      "status", "status_message", "rid", "x_request_id")
                    if r[k] is not None}  # fmt: skip
            if r["room"] is not None:
                args["room"] = str(r["room"])
            cat = "span,error" if r["status"] == "ERROR" else "span"
            out.append(Slice(host, f"spans {lane}", r["name"] or "span", cat,
                             on_ref(host, r["start_us"]), end - r["start_us"],
                             args | {"raw_ts_us": r["start_us"]}))  # fmt: skip
    return out


def _counters(con, where: str, params: list, on_ref) -> list[Counter]:
    """Decode load from SGLang's batch lines, one counter per host (and ranks, where a host
    logged several)."""
    rows = con.execute(
        f"""SELECT host, ranks, ts_us, running_req, token_usage,
                   count(DISTINCT ranks) OVER (PARTITION BY host) AS n_ranks
            FROM batches WHERE {where} AND phase = 'Decode' AND ts_us IS NOT NULL
            AND host IS NOT NULL ORDER BY ts_us""",
        params,
    ).fetchall()
    out = []
    for host, ranks, ts, running, usage, n_ranks in rows:
        tag = f" {ranks}" if n_ranks > 1 and ranks else ""
        t = on_ref(host, ts)
        if running is not None:
            out.append(Counter(host, f"#running-req{tag}", t, float(running)))
        if usage is not None:
            out.append(Counter(host, f"token usage{tag}", t, float(usage)))
    return out


def _steps(con, where: str, params: list, on_ref, limit: int) -> tuple[list[Slice], int]:
    """Decode steps (step records, else canary records) as slices from one step to the
    next on the same host: the first `limit` in time, and how many there are."""
    base = f"""SELECT host, step, min(ts_us) AS ts, max(bs) AS bs, any_value(rids) AS rids,
                      any_value(rooms) AS rooms
               FROM (SELECT host, step, ts_us, bs, rids, rooms, run FROM steps
                     UNION ALL SELECT host, step, ts_us, bs, NULL, NULL, run FROM canary)
               WHERE {where} AND host IS NOT NULL AND ts_us IS NOT NULL AND step IS NOT NULL
               GROUP BY host, step"""
    (total,) = con.execute(f"SELECT count(*) FROM ({base})", params).fetchall()[0]
    rows = con.execute(
        f"""SELECT host, step, ts, bs, rids, rooms,
                   least(coalesce(lead(ts) OVER (PARTITION BY host ORDER BY ts, step) - ts, 0),
                         {STEP_CAP_US}) AS dur
            FROM ({base}) ORDER BY ts, host, step LIMIT {max(limit, 0)}""",
        params,
    ).fetchall()
    out = []
    shift = {h: on_ref(h, 0) for h in {r[0] for r in rows}}
    for host, step, ts, bs, rids, rooms, dur in rows:
        args = {"step": step, "raw_ts_us": ts}
        if bs is not None:
            args["bs"] = bs
        if rids:
            args["rids"] = rids
        if rooms:
            args["rooms"] = rooms
        out.append(Slice(host, "decode steps", f"step {step}", "step", ts + shift[host], dur, args))
    return out, total


def _page_writes(
    con, where: str, params: list, on_ref, per_step: bool, limit: int
) -> tuple[list[Slice], int]:
    """Canary records with writes outside the expected pages: one instant each, or one per
    step and host when there are too many; the first `limit`, and how many there are."""
    cond = f"{where} AND n_unexpected > 0 AND host IS NOT NULL AND ts_us IS NOT NULL"
    if per_step:
        (total,) = con.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT host, step FROM canary WHERE {cond})", params
        ).fetchall()[0]
        rows = con.execute(
            f"""SELECT host, min(ts_us), step, count(*) AS layers, sum(n_unexpected),
                       min(layer), max(layer)
                FROM canary WHERE {cond} GROUP BY host, step ORDER BY 2 LIMIT {max(limit, 0)}""",
            params,
        ).fetchall()
        return [
            Slice(host, "page writes", f"unexpected page writes ×{layers} layers", "canary",
                  on_ref(host, ts), 0,
                  {"step": step, "layers": layers, "unexpected_pages": int(n),
                   "layer_range": f"{lo}-{hi}", "raw_ts_us": ts, "aggregated": True})
            for host, ts, step, layers, n, lo, hi in rows
        ], total  # fmt: skip
    (total,) = con.execute(f"SELECT count(*) FROM canary WHERE {cond}", params).fetchall()[0]
    rows = con.execute(
        f"""SELECT host, ts_us, step, layer, n_expected, n_changed, n_unexpected,
                   unexpected[:{PAGES_SHOWN}]
            FROM canary WHERE {cond} ORDER BY ts_us LIMIT {max(limit, 0)}""",
        params,
    ).fetchall()
    return [
        Slice(host, "page writes", f"unexpected page writes L{layer}", "canary",
              on_ref(host, ts), 0,
              {"step": step, "layer": layer, "expected": ne, "changed": nc,
               "unexpected": nu, "pages": ",".join(map(str, pages or [])), "raw_ts_us": ts})
        for host, ts, step, layer, ne, nc, nu, pages in rows
    ], total  # fmt: skip
