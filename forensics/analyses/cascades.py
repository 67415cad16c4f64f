"""Who failed first: failures on every host and rank (the `failures` view), linked by the
echo rules of echoes.toml (a later failure that points back to an earlier one), into
cascades — and the first failure of the one that stands out.

A failure explained by an earlier one (an echo rule matches the pair within its window)
is an echo; following each echo back to what explains it ends at a root, a failure no
earlier one explains. A root whose echoes, directly or through other echoes, reach at least
MIN_ECHOES other rooms (one room told by each side and rank is one failure) is a cascade
when its window's failed rooms exceed the background: failed rooms a request elsewhere in
the incident at the same load stratum (concurrency quintiles; a second elsewhere where
there are no harness requests; at least MIN_OUTSIDE of the incident outside the window),
a one-sided Poisson p below ALPHA. A cascade that lasts to the end of the capture (a peer
lost for good) has too little "elsewhere" in time: it is judged against the same window
on the decode hosts it did not reach, at the same load strata (failed requests a request
there), and against the time before it where at least MIN_BEFORE of the requests lie;
both must stand out. Failures that rise with the load reach every host alike, so they
stand out on neither. The first failure is the earliest root of the cascades that stand
out.

Order across hosts: each host's clock orders its own lines; across a prefill–decode pair
the skew view's bounds on their clocks settle it (or say it is within their uncertainty)
where the probes' rooms on both give them, else the stock lines' causal pairs bound
decode's clock from below (`_stock_bounds`); elsewhere the answer says the order holds
only if their clocks agree.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from ..clip import clip
from ..scope import Db, Runs, Scope, scoped
from ..timefmt import iso_us

MIN_ECHOES = 3
MIN_OUTSIDE = 0.25  # of the incident outside a cascade's window: its background
MIN_BEFORE = 0.05  # … a cascade to the end: the time before it, where it holds this much
ALPHA = 0.01
# each echo relation, and the column of a failure it compares
KEYS = {"room": "room", "room_other_rank": "room", "rid": "rid", "peer": "peer", "host": "host"}
RELATIONS = tuple(KEYS)
COLUMNS = ("ts_us", "host", "tp", "kind", "rid", "room", "peer", "code", "reason", "began_us")


@dataclass(frozen=True)
class Echo:
    name: str
    doc: str
    echo: dict[str, str]
    relation: str
    window_s: float
    sample: str
    origin: str
    cause: dict[str, str] = field(default_factory=dict)
    waited: bool = False  # a timeout whose wait began at or before its cause


@lru_cache(maxsize=1)
def rules() -> tuple[Echo, ...]:
    text = resources.files(__package__).joinpath("echoes.toml").read_text()
    out = []
    for d in tomllib.loads(text)["echo"]:
        rule = Echo(**d)
        if rule.relation not in RELATIONS:
            raise ValueError(f"echo {rule.name}: unknown relation {rule.relation!r}")
        out.append(rule)
    return tuple(out)


@dataclass
class Requests:
    """The harness's requests a background is counted over: each one's send time (µs) and
    load stratum; where known, its rid and a way to each rid's decode host (read only for
    the comparison across hosts: suspects' table, which the report computes anyway)."""

    sent: np.ndarray
    stratum: np.ndarray
    rid: np.ndarray | None = None
    host_of: Callable[[], dict[str, str]] | None = None


@dataclass
class Cascade:
    root: int  # index into the failures
    echoes: list[int]  # every failure it explains, directly or through another echo
    expected: float  # failures the background predicts in its window
    p: float


@dataclass
class FirstFailure:
    host: str
    rank: int | None
    ts_us: int
    kind: str
    code: str | None  # the transport's code, where the line gives one
    line: str
    template: str | None
    echoes: int
    hosts: list[str]
    span_s: float
    p: float
    order: str  # how far the order across hosts holds

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def headline(self) -> str:
        rank = "" if self.rank is None else f" TP{self.rank}"
        what = f"{self.kind} {self.code}" if self.code else self.kind
        said = re.sub(r"^\[[^\]]*\]\s*", "", self.line)  # the line without its prefix
        return (
            f"first failure: {self.host}{rank} at {iso_us(self.ts_us)}, {what} "
            f"({clip(said, 120)}); {self.echoes} later failures on "
            f"{', '.join(self.hosts)} echo it over {self.span_s:.1f} s; {self.order}"
        )


def matches(want: dict[str, str], row: dict) -> bool:
    """Whether a failure (a dict of COLUMNS) is what `want` describes."""
    for key, value in want.items():
        if key == "reason":
            if value not in (row.get("reason") or ""):
                return False
        elif row.get(key) != value:
            return False
    return True


def _related(rule: Echo, echo: dict, cause: dict) -> bool:
    if rule.waited:  # the timeout's wait began at or before its cause
        began = echo.get("began_us")
        if began is None or began > cause["ts_us"]:
            return False
    rel = rule.relation
    if rel == "room":
        return echo["room"] is not None and echo["room"] == cause["room"]
    if rel == "room_other_rank":
        return (echo["room"] is not None and echo["room"] == cause["room"]
                and echo["host"] == cause["host"] and echo["tp"] != cause["tp"])  # fmt: skip
    if rel == "rid":
        return echo["rid"] is not None and echo["rid"] == cause["rid"]
    if rel == "peer":
        return echo["peer"] is not None and echo["peer"] == cause["peer"]
    return echo["host"] == cause["host"]


def explained_by(failures: list[dict]) -> list[int | None]:
    """For each failure (in time order), the earlier failure that explains it (the
    latest one an echo rule links it to), or None. Each rule keeps the earlier failures
    its `cause` takes by the key its relation compares (room, rid, peer or host), so a
    failure is weighed against those alone, newest first, until the rule's window ends."""
    parent: list[int | None] = [None] * len(failures)
    index: dict[tuple[str, object], list[int]] = {}  # (rule, key) -> causes, in time order
    keyed = [(rule, KEYS[rule.relation]) for rule in rules()]
    for j, row in enumerate(failures):
        best = None
        began = row.get("began_us")
        for rule, col in keyed:
            if rule.waited and began is None:
                continue  # not a timeout, or its wait's start unknown
            key = row[col]
            if key is None or not matches(rule.echo, row):
                continue
            for i in reversed(index.get((rule.name, key), ())):
                cause = failures[i]
                if row["ts_us"] - cause["ts_us"] > rule.window_s * 1e6:
                    break
                if rule.waited and cause["ts_us"] < began:
                    break  # older causes came before the wait began
                if _related(rule, row, cause):
                    best = i if best is None else max(best, i)
                    break
        parent[j] = best
        for rule, col in keyed:
            key = row[col]
            if key is not None and matches(rule.cause, row):
                index.setdefault((rule.name, key), []).append(j)
    return parent


def cascades(
    failures: list[dict], requests: Requests | tuple[np.ndarray, np.ndarray] | None = None
) -> list[Cascade]:
    """The cascades among `failures` (time order), strongest first. `requests`: the
    harness's requests (or their send times and load strata), for the background; without
    them, failures a second elsewhere."""
    req = Requests(*requests) if isinstance(requests, tuple) else requests
    if req is not None and not len(req.sent):
        req = None
    members = _members(explained_by(failures))
    out = []
    unit = _units(failures)
    first = _first_of_unit(unit)  # one failure a transfer: the first line of its room
    times = np.array([f["ts_us"] for f in failures], dtype=np.int64)
    for root, echoes in members.items():
        spread = {unit[j] for j in echoes} - {unit[root]}
        if len(spread) < MIN_ECHOES:
            continue  # the same room told by each side and rank is one failure
        lo, hi = int(times[root]), int(times[max(echoes)])
        expected = _background(times[first], lo, hi, req)
        seen = int(np.sum((times[first] >= lo) & (times[first] <= hi)))
        p = _poisson_sf(seen, expected)
        if not _elsewhere(times, lo, hi, req):  # to the end of the capture
            reached = {failures[i]["host"] for i in [root, *echoes]}
            p = _to_the_end(failures, p, lo, hi, reached, req)
        if p < ALPHA:
            out.append(Cascade(root, sorted(echoes), expected, p))
    return sorted(out, key=lambda c: (c.p, times[c.root]))


def _members(parent: list[int | None]) -> dict[int, list[int]]:
    """Each root and the failures it explains, directly or through other echoes."""
    root_of = list(range(len(parent)))
    for j, p in enumerate(parent):
        if p is not None:
            root_of[j] = root_of[p]
    members: dict[int, list[int]] = {}
    for j, r in enumerate(root_of):
        if r != j:
            members.setdefault(r, []).append(j)
    return members


def _to_the_end(
    failures: list[dict], p_before: float, lo: int, hi: int, reached: set, req: Requests | None
) -> float:
    """The p of a cascade whose window leaves too little of the incident after it: the
    larger of the p across hosts and `p_before`, the p against the time before it (1
    where either cannot be told: no host it did not reach, too little before it)."""
    if req is None or req.host_of is None or req.rid is None:
        return 1.0
    if float(np.mean(req.sent < lo)) < MIN_BEFORE:
        return 1.0
    return max(p_before, _across_hosts(failures, lo, hi, reached, req))


def _across_hosts(failures: list[dict], lo: int, hi: int, reached: set, req: Requests) -> float:
    """One-sided Poisson p of the failed requests sent in [lo, hi] on the decode hosts in
    `reached`, against the rate on the other decode hosts at each load stratum (a failed
    request: a failure names its rid). 1 where no request went to another host."""
    failed_rids = {f["rid"] for f in failures if f["rid"] is not None and f["ts_us"] >= lo}
    host_of = req.host_of() if req.host_of is not None else {}
    host = np.asarray([host_of.get(r) or "" for r in req.rid], dtype=object)
    window = (req.sent >= lo) & (req.sent <= hi) & (host != "")
    on = window & np.isin(host, sorted(reached))
    off = window & ~on
    if not on.any() or not off.any():
        return 1.0
    failed = np.isin(np.asarray(req.rid, dtype=object), sorted(failed_rids))
    pooled = (int(np.sum(failed & off)) + 0.5) / (int(np.sum(off)) + 1)
    expected = 0.0
    for s in np.unique(req.stratum[on]):
        there = off & (req.stratum == s)
        rate = (
            (int(np.sum(failed & there)) + 0.5) / (int(np.sum(there)) + 1)
            if there.any()
            else pooled
        )
        expected += int(np.sum(on & (req.stratum == s))) * rate
    return _poisson_sf(int(np.sum(failed & on)), expected)


def _units(failures: list[dict]) -> list[tuple]:
    """What each failure is a failure of: its room, else its request, else itself."""
    return [("room", f["room"]) if f["room"] is not None else
            ("rid", f["rid"]) if f["rid"] is not None else ("line", i)
            for i, f in enumerate(failures)]  # fmt: skip


def _first_of_unit(unit: list[tuple]) -> np.ndarray:
    seen: set[tuple] = set()
    keep = []
    for i, u in enumerate(unit):
        if u not in seen:
            seen.add(u)
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def _elsewhere(times: np.ndarray, lo: int, hi: int, requests: Requests | None) -> bool:
    """Whether at least MIN_OUTSIDE of the incident lies outside [lo, hi] (its requests,
    else its time): a window over nearly all of it has no background to compare with."""
    if requests is not None:
        sent = requests.sent
        return float(np.mean((sent < lo) | (sent > hi))) >= MIN_OUTSIDE
    span = int(times.max() - times.min()) if len(times) else 0
    return span > 0 and 1 - (hi - lo) / span >= MIN_OUTSIDE


def _background(times: np.ndarray, lo: int, hi: int, requests: Requests | None) -> float:
    """Failures the rest of the incident predicts in [lo, hi]: outside it, failures a
    request at each load stratum (a failure is the stratum of the request sent last
    before it); inside, that rate times its requests of each stratum. Without requests,
    failures a second."""
    inside = (times >= lo) & (times <= hi)
    if requests is not None:
        sent, stratum = requests.sent, requests.stratum
        order = np.argsort(sent, kind="stable")
        sent, stratum = sent[order], stratum[order]
        at = np.clip(np.searchsorted(sent, times, side="right") - 1, 0, len(sent) - 1)
        fail_stratum = stratum[at]
        sent_inside = (sent >= lo) & (sent <= hi)
        expected = 0.0
        for s in np.unique(stratum):
            there = int(np.sum(~sent_inside & (stratum == s)))
            failed = int(np.sum(~inside & (fail_stratum == s)))
            here = int(np.sum(sent_inside & (stratum == s)))
            # a stratum seen only inside the window: the whole incident's rate
            rate = failed / there if there else float(np.sum(~inside)) / max(
                int(np.sum(~sent_inside)), 1)  # fmt: skip
            expected += here * rate
        return expected
    span = max(int(times.max() - times.min()), 1) if len(times) else 1
    rest_s = max(span - (hi - lo), 1) / 1e6
    return float(np.sum(~inside)) / rest_s * max(hi - lo, 1) / 1e6


def _poisson_sf(k: int, mu: float) -> float:
    """P(X ≥ k) for X ~ Poisson(mu)."""
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    term = math.exp(-mu)
    below = term
    for i in range(1, k):
        term *= mu / i
        below += term
    return max(0.0, 1.0 - below)


def first_failure(db: Db = None, run: Runs = None) -> FirstFailure | None:
    with scoped(db, run) as s:
        return s.memo(("first_failure", tuple(s.runs)), lambda: _first(s))


def _first(s: Scope) -> FirstFailure | None:
    got = first_cascade(s)
    return None if got is None else got[0]


def first_cascade(db: Db = None, run: Runs = None) -> tuple[FirstFailure, list[dict]] | None:
    """The first failure and its cascade's failures (rows of `failures`, the first one
    first, its echoes in time order), or None when no cascade stands out."""
    with scoped(db, run) as s:
        return s.memo(("first_cascade", tuple(s.runs)), lambda: _first_cascade(s))


def _first_cascade(s: Scope) -> tuple[FirstFailure, list[dict]] | None:
    where, params = s.where_followed()  # the failures are the evidence runs' lines
    rows = s.con.execute(
        f"""SELECT {", ".join(COLUMNS)}, source_id, entry_no, template FROM failures
            WHERE {where} ORDER BY ts_us, host, source_id, entry_no""",
        params,
    ).fetchall()
    failures = [dict(zip((*COLUMNS, "source_id", "entry_no", "template"), r, strict=True))
                for r in rows]  # fmt: skip
    found = cascades(failures, _requests(s))
    if not found:
        return None
    top = min(found, key=lambda c: failures[c.root]["ts_us"])
    root = failures[top.root]
    line, text = s.con.execute(
        """SELECT e.message, l.text FROM entries e
           LEFT JOIN lines l USING (source_id, entry_no)
           WHERE e.source_id = ? AND e.entry_no = ?""",
        [root["source_id"], root["entry_no"]],
    ).fetchall()[0]
    hosts = sorted({failures[i]["host"] for i in [top.root, *top.echoes]})
    span = (failures[max(top.echoes)]["ts_us"] - root["ts_us"]) / 1e6
    cascade = [failures[i] for i in [top.root, *top.echoes]]
    order = order_sentence(root, cascade, *_bounds(s))
    first = FirstFailure(root["host"], root["tp"], root["ts_us"], root["kind"], root["code"],
                         line or "", text, len(top.echoes), hosts, span, top.p, order)  # fmt: skip
    return first, cascade


def _bounds(s: Scope) -> tuple[Bounds, dict[tuple[str, str], str]]:
    """(prefill host, decode host) -> bounds on decode's clock − prefill's (µs): the skew
    view's (the tightest over runs) where the probes' rooms give them, else those of the
    causal pairs in stock lines; and, for the second, where they came from."""
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""SELECT src_host, dst_host, max(lower_us), min(upper_us) FROM skew
            WHERE {where} GROUP BY ALL""",
        params,
    ).fetchall()
    out: Bounds = {(src, dst): (lo, hi) for src, dst, lo, hi in rows}
    said: dict[tuple[str, str], str] = {}
    for pair, lo in _stock_bounds(s).items():
        if pair not in out:
            out[pair], said[pair] = (lo, None), STOCK_BOUND
    return out, said


STOCK_BOUND = "the bound that decode's Receive of a room before prefill's send of it gives"
Bounds = dict[tuple[str, str], tuple[int | None, int | None]]


def _stock_bounds(s: Scope) -> dict[tuple[str, str], int]:
    """(prefill host, decode host) -> a lower bound on decode's clock − prefill's (µs)
    from stock lines: decode receives a room's request before prefill can send its KV
    (decode allocates first), so decode's `Receive` of the room, read on decode's clock,
    less prefill's send of it (its ReqTimeStats, logged when the transfer is done) or
    its transfer failure (not a bootstrap timeout, which may precede decode's Receive),
    on prefill's, is at most the offset."""
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""WITH recv AS (
                SELECT run, host, room, min(ts_us) AS t FROM rid_rooms
                WHERE {where} AND event = 'Receive' GROUP BY ALL
            ), sent AS (
                SELECT run, host, room, max(ts_us) AS t FROM req_stats
                WHERE {where} AND type = 'prefill' AND room IS NOT NULL GROUP BY ALL
                UNION ALL
                SELECT run, host, room, ts_us FROM transfers
                WHERE {where} AND lower(side) = 'prefill' AND room IS NOT NULL
                  AND NOT contains(coalesce(reason, ''), 'Bootstrapping')
            ), prefill AS (SELECT DISTINCT run, host FROM sent)
            SELECT p.host, r.host, max(r.t - p.t)
            FROM sent p JOIN recv r ON r.run = p.run AND r.room = p.room AND r.host <> p.host
            WHERE (r.run, r.host) NOT IN (SELECT (run, host) FROM prefill)
            GROUP BY ALL""",
        params * 3,
    ).fetchall()
    return {(src, dst): lo for src, dst, lo in rows}


def order_sentence(
    root: dict, cascade: list[dict], bounds: Bounds, said_by: dict | None = None
) -> str:
    """How far "it came first" holds across hosts: for each other host, the first failure
    against that host's first echo, within the bounds of the pair where they exist
    (decode's clock − prefill's: the skew view's, or `said_by` names where they came
    from), else as each clock says."""
    host, at = root["host"], root["ts_us"]
    others = sorted({r["host"] for r in cascade} - {host})
    if not others:
        return "one host: its clock orders them"
    said = []
    for other in others:
        gap = min(r["ts_us"] for r in cascade if r["host"] == other) - at
        pair = (other, host) if (other, host) in bounds else (host, other)
        within = (said_by or {}).get(pair, "the clock bounds")
        if (other, host) in bounds:  # the first failure on decode, the other prefill
            lo = bounds[(other, host)][0]
            margin = None if lo is None else gap + lo
        elif (host, other) in bounds:  # the first failure on prefill, the other decode
            hi = bounds[(host, other)][1]
            margin = None if hi is None else gap - hi
        else:
            said.append(f"no clock bound between {host} and {other}: before it by "
                        f"{gap / 1e6:.3f} s only if their clocks agree")  # fmt: skip
            continue
        if margin is None:
            said.append(f"between {host} and {other} {within} bound one side only: before "
                        f"it by {gap / 1e6:.3f} s only if their clocks agree"
                        if within == "the clock bounds" else
                        f"between {host} and {other} there is only {within}, on one side: "
                        f"before it by {gap / 1e6:.3f} s only if their clocks agree")  # fmt: skip
        elif margin >= 0:
            said.append(f"before {other}'s first echo by at least {margin / 1e6:.3f} s "
                        f"within {within}")  # fmt: skip
        else:
            by = "" if within == "the clock bounds" else f", by {within}"
            said.append(f"the order with {other} is within the clocks' uncertainty "
                        f"({-margin / 1e6:.3f} s short of certain{by})")  # fmt: skip
    return "; ".join(said)


def _requests(s: Scope) -> Requests | None:
    from .onset import load_strata

    where, params = s.where()
    got = s.con.execute(
        f"""SELECT start_us, concurrency, rid FROM results
            WHERE {where} AND start_us IS NOT NULL""",
        params,
    ).fetchnumpy()
    if not len(got["start_us"]):
        return None
    conc = np.asarray(np.ma.filled(np.ma.asarray(got["concurrency"], dtype=float), np.nan))
    rid = np.asarray(np.ma.filled(np.ma.asarray(got["rid"]).astype(object), None), dtype=object)
    return Requests(np.asarray(got["start_us"], dtype=np.int64), load_strata(conc), rid,
                    lambda: _decode_hosts(s))  # fmt: skip


def _decode_hosts(s: Scope) -> dict[str, str]:
    """Each judged request's decode host, by rid (suspects' table: request_evidence's)."""
    from .suspects import suspects

    got = suspects(s)
    if got.table is None or got.rows is None or "decode_host" not in got.table.columns:
        return {}
    hosts = got.table.columns["decode_host"]
    return {str(r): h for r, h in zip(got.rows["rid"], hosts, strict=True) if r and h}
