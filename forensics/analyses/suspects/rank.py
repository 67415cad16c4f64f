"""Test every predicate against corruption and rank them.

Per predicate: a 2×2 table over the requests for which it is known; Fisher's exact p;
the relative risk (Katz interval) and the conditional odds ratio (exact interval).
Tarone's screen first: a predicate whose margins cannot give a p below the level is not
tested and not counted. Then Benjamini–Hochberg (or –Yekutieli) q over the tested ones;
Mantel–Haenszel within load strata (quintiles of concurrency at send) to tell a factor
from load; predicates whose corrupted requests mostly coincide (Jaccard ≥ 0.8) grouped.

A factor set per run (a tag, a server argument) is tested with runs as the units: each
run with it against each run without (Fisher, as `compare` does for a pair), and its p
is the largest of those (an intersection–union test: every pair must differ, the same
way), so that a flag is never credited with each request as a draw of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..stats import (
    ALPHA,
    Hypergeom,
    TwoByTwo,
    fdr,
    finite,
    fisher_many,
    mantel_haenszel,
    mantel_haenszel_arrays,
    relative_risk,
    two_by_two,
)  # fmt: skip
from .causes import causes_for, for_run
from .features import Feature, Table
from .predicates import Predicate, Skipped, predicates

STRATA = 5  # load strata: quintiles of concurrency at send
MIN_STRATUM = 10  # requests a stratum must hold (thinner ones merge with a neighbour)
JACCARD = 0.8  # predicates covering these nearly the same corrupted requests are one line
# verdicts, in the order the ranking shows them
SUSPECT, LOAD, LESS, BORDERLINE, NOISE = (
    "suspect", "explained by load", "less corruption with it", "borderline", "not significant",
)  # fmt: skip
# a line logged after the transfer goes with corruption as its consequence: said, and
# ranked below every candidate cause; a few lines are an anecdote: said, never a suspect
AFTER, ANECDOTAL = "after its transfer (a consequence)", "anecdotal (fewer than 3 lines)"
# a line near the transfer whose association does not hold within one-minute strata (a
# time-stratified case-crossover): it goes with the bad minutes, not with the transfers
IN_TIME = "co-occurs in time"
# within load strata the pooled odds ratio can lie on the other side of 1 from the crude
# one: above 1 crude, below within (reversed) is never a suspect; below 1 crude, above
# within (masked by load) is harm load hid, ranked after the suspects
REVERSED = "reversed within load strata"
MASKED = "harmful within load strata (masked by load)"
HOLDS = "holds within load strata"
MIN_OCCURRENCES = 3
TIERS = {SUSPECT: 0, ANECDOTAL: 1, IN_TIME: 1, MASKED: 1, LOAD: 2, LESS: 3, REVERSED: 3,
         BORDERLINE: 4, NOISE: 5, AFTER: 6}  # fmt: skip


@dataclass
class Stratified:
    odds_ratio: float | None  # Mantel–Haenszel pooled
    p: float | None  # Cochran–Mantel–Haenszel
    verdict: str

    def as_dict(self) -> dict:
        return {"odds_ratio": finite(self.odds_ratio), "p": finite(self.p),
                "verdict": self.verdict}  # fmt: skip


@dataclass
class Suspect:
    feature: str
    predicate: str
    table: TwoByTwo
    q: float
    covers: int  # corrupted requests with it
    verdict: str
    stratified: Stratified | None
    load: bool
    level: str | None
    units: str = "requests"  # or runs
    runs_with: list[str] = field(default_factory=list)
    runs_without: list[str] = field(default_factory=list)
    weakest_pair: tuple[str, str] | None = None  # runs as units: the pair p and CIs come from
    group: int = 0  # 1-based: its line in the ranking
    members: list[str] = field(default_factory=list)  # the group's other predicates
    known_causes: list[str] = field(default_factory=list)
    experiment: dict | None = None
    occurrences: int | None = None  # distinct lines behind it (a line's template near it)
    time_p: float | None = None  # Mantel–Haenszel p within one-minute strata (lines near it)
    selected: list[str] = field(default_factory=list)  # a family's members that pass (BB)
    after: bool = False  # a window after the transfer: what corruption caused, if anything
    # the rows it holds for (a suspect's only: the headline reads it), never serialised
    exposed: np.ndarray | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        t = self.table
        return {
            "feature": self.feature, "predicate": self.predicate,
            "corrupted_with": t.exposed_cases, "n_with": t.exposed_total,
            "corrupted_without": t.control_cases, "n_without": t.control_total,
            "rr": finite(t.relative_risk), "rr_ci": [finite(t.rr_low), finite(t.rr_high)],
            "odds_ratio": finite(t.odds_ratio), "or_ci": [finite(t.or_low), finite(t.or_high)],
            "p": finite(t.p_value), "q": finite(self.q), "covers": self.covers,
            "stratified": self.stratified.as_dict() if self.stratified else None,
            "group": self.group, "verdict": self.verdict, "load": self.load,
            "units": self.units, "runs_with": self.runs_with, "runs_without": self.runs_without,
            "weakest_pair": list(self.weakest_pair) if self.weakest_pair else None,
            "known_causes": self.known_causes, "experiment": self.experiment,
            "occurrences": self.occurrences, "time_p": finite(self.time_p),
            "selected": self.selected, "after": self.after,
        }  # fmt: skip


@dataclass
class Screened:
    feature: str
    predicate: str
    n_with: int
    why: str

    def as_dict(self) -> dict:
        return {"feature": self.feature, "predicate": self.predicate, "n_with": self.n_with,
                "why": self.why}  # fmt: skip


@dataclass
class Ranking:
    requests: int  # judged requests
    corrupted: int
    tested: list[Suspect]  # best first
    screened_out: list[Screened]
    skipped: list[Skipped]  # factors that gave no predicate
    strata: list[tuple[float, float, int]]  # load strata: (lowest, highest concurrency, requests)
    tags: dict[str, str] = field(default_factory=dict)  # the busiest run's: its server, sessions
    anchors: dict[str, int] = field(default_factory=dict)  # anchor kind -> judged requests


def rank(
    table: Table,
    features: tuple[Feature, ...],
    level: float = ALPHA,
    min_support: int = 5,
    dependent: bool = False,
    extra: tuple[list[Predicate], list[Skipped]] = ([], []),
) -> Ranking:
    """Every predicate of `features` (and the `extra` ones: lines near the transfer)
    tested, screened or skipped, best first."""
    preds, skipped = predicates(table, features)
    y = table.corrupted
    peers = [p for p in preds if p.family]  # hosts or ranks past the limit: one family each
    preds = [p for p in preds if not p.family]
    folded, screened, members = _fold(extra[0] + peers, y, level, min_support)
    simes = {id(p): pv for p, pv in folded}
    preds, skipped = preds + [p for p, _ in folded], skipped + extra[1]
    tested = _tables(preds, simes, table, level, min_support, screened)
    qs = fdr([t.p_value if t.p_value is not None else 1.0 for _, t in tested], dependent)
    _within(tested, qs, members, level, dependent)
    for i, ((p, _), q) in enumerate(zip(tested, qs, strict=True)):
        if id(p) in simes and q < level:  # a family that passes: its exact interval too
            full = two_by_two(*_counts(p.exposed, p.known, y))
            full.p_value = simes[id(p)]
            tested[i] = (p, full)
    strata, bounds = _strata(table)
    pairs = _judged(tested, qs, table, strata, level)
    pairs.sort(key=lambda sp: _order(sp[0]))
    _group(pairs, y)
    out = [s for s, _ in pairs]
    tags = _busiest_tags(table)
    for s in out:
        causes = causes_for(s.feature, s.level)
        s.known_causes = [c.id for c in causes]
        s.experiment = for_run(causes[0].experiment.as_dict(), tags) if causes else None
    kinds = np.unique(table.anchor.astype(str), return_counts=True) if (
        table.anchor is not None) else ([], [])  # fmt: skip
    anchors = {str(k): int(c) for k, c in zip(*kinds, strict=True)}
    return Ranking(len(table), int(y.sum()), out, screened, skipped, bounds, tags, anchors)


def _tables(
    preds: list[Predicate],
    simes: dict[int, float],
    table: Table,
    level: float,
    min_support: int,
    screened: list[Screened],
) -> list[tuple[Predicate, TwoByTwo]]:
    """Each predicate's 2x2 table, or its reason to be screened out (appended to
    `screened`); a family's chosen member carries its Simes p without a full table."""
    y = table.corrupted
    tested: list[tuple[Predicate, TwoByTwo]] = []
    for p in preds:
        if id(p) in simes:  # screened with its family already
            tested.append((p, _light(p, y, simes[id(p)])))
            continue
        table_or_why = _screen(p, y, table, level, min_support)
        if isinstance(table_or_why, str):
            screened.append(Screened(p.feature, p.text, int((p.exposed & p.known).sum()),
                                     table_or_why))  # fmt: skip
        else:
            tested.append((p, table_or_why))
    return tested


def _judged(
    tested: list[tuple[Predicate, TwoByTwo]],
    qs: list[float],
    table: Table,
    strata: np.ndarray | None,
    level: float,
) -> list[tuple[Suspect, Predicate]]:
    """Each tested predicate's verdict: within load strata, and for a line near the
    transfer within one-minute strata too (else it only co-occurs in time). A family's
    member (a line near the transfer, a peer) that does not pass gets neither stratified
    test: its verdict needs none, and an incident has a thousand of them."""
    y = table.corrupted
    minutes = _minutes(table)
    pairs = []
    for (p, t), q in zip(tested, qs, strict=True):
        quiet = p.family is not None and q >= level
        strat = None if p.per_run or quiet else _stratified(p, y, strata, (q, t), level)
        verdict = _verdict(t, q, strat, level, p)
        time_p = _in_time(p, y, minutes) if p.occurrences is not None and not quiet else None
        if verdict == SUSPECT and time_p is not None and time_p >= level:
            verdict = IN_TIME
        pairs.append((Suspect(
            p.feature, p.text, t, q, t.exposed_cases, verdict, strat,
            p.load, p.level, "runs" if p.per_run else "requests", p.runs_with, p.runs_without,
            p.weakest_pair, occurrences=p.occurrences, time_p=time_p, selected=p.selected,
            after=p.after, exposed=p.exposed & p.known if verdict == SUSPECT else None,
        ), p))  # fmt: skip
    return pairs


def _within(
    tested: list[tuple[Predicate, TwoByTwo]],
    qs: list[float],
    members: dict[int, list[tuple[float, Predicate]]],
    level: float,
    dependent: bool,
) -> None:
    """Benjamini–Bogomolov: within each of the R families that pass (of m tested), its
    members are tested by BH at level R/m, and those that pass are the family's
    `selected` (its windows and sides, or its hosts)."""
    fams = [i for i, (p, _) in enumerate(tested) if id(p) in members]
    passed = [i for i in fams if qs[i] < level]
    if not passed:
        return
    bar = level * len(passed) / len(fams)
    for i in passed:
        p = tested[i][0]
        inside = members[id(p)]
        q_in = fdr([pv for pv, _ in inside], dependent)
        p.selected = [_member(m) for (_, m), q in zip(inside, q_in, strict=True) if q < bar]


def _member(p: Predicate) -> str:
    """A family member in words: a line's side, window and direction; a peer's level."""
    if p.feature.startswith("line "):
        return f"{p.feature.split()[1]} {p.level} s {'after' if p.after else 'before'}"
    return str(p.level)


def _fold(
    preds: list[Predicate], y: np.ndarray, level: float, min_support: int
) -> tuple[list[tuple[Predicate, float]], list[Screened], dict[int, list[tuple[float, Predicate]]]]:
    """A family (one template over its grid of windows and sides) is one test: Simes' p
    over its members' Fisher p, carried by the member with the smallest (its window
    marked as chosen); a family none of whose members passes the screen is screened out
    once. Every member's p and screen at once (fisher_many); no member's full table."""
    if not preds:
        return [], [], {}
    pv, least, n1, n0 = _fisher_all(preds, y)
    fams: dict[str, list[tuple[float, Predicate]]] = {}
    first: dict[str, tuple[Predicate, str]] = {}
    for i, p in enumerate(preds):
        key = p.family or p.feature
        why = (f"fewer than {min_support} requests with it" if n1[i] < min_support
               else "every request has it" if n0[i] == 0
               else f"its margins allow no p below {least[i]:.2g} (Tarone)"
               if least[i] >= level else None)  # fmt: skip
        if why is None:
            fams.setdefault(key, []).append((float(pv[i]), p))
        else:
            first.setdefault(key, (p, why))
    out: list[tuple[Predicate, float]] = []
    by_best: dict[int, list[tuple[float, Predicate]]] = {}
    for members in fams.values():
        members.sort(key=lambda m: m[0])
        m = len(members)
        simes = min(1.0, min(m * p / (i + 1) for i, (p, _) in enumerate(members)))
        best = members[0][1]
        if m > 1 and best.family and best.family.startswith("peers "):
            best.text += f" (against the rest; one of {m} tested: Simes)"
        elif m > 1:
            best.text += f" (the nearest of {m} windows and sides: Simes)"
        out.append((best, simes))
        by_best[id(best)] = members
    screened = [Screened(p.feature, p.text, int((p.exposed & p.known).sum()), why)
                for key, (p, why) in first.items() if key not in fams]  # fmt: skip
    return out, screened, by_best


def _fisher_all(
    preds: list[Predicate], y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every predicate's Fisher p, the least p its margins allow, and its exposed and
    unexposed counts among the known. Counted, not stacked twice: the unexposed are the
    known less the exposed, and the predicates share a few `known` masks."""
    e = np.stack([p.exposed for p in preds])
    shared: dict[int, tuple[np.ndarray, list[int]]] = {}
    for i, p in enumerate(preds):
        shared.setdefault(id(p.known), (p.known, []))[1].append(i)
    known_n, known_y = np.zeros(len(preds), np.int64), np.zeros(len(preds), np.int64)
    for known, rows in shared.values():
        e[rows] &= known
        known_n[rows], known_y[rows] = np.count_nonzero(known), np.count_nonzero(known & y)
    n1, a = np.count_nonzero(e, axis=1), np.count_nonzero(e & y, axis=1)
    pv, least = fisher_many(a, n1, known_y - a, known_n - n1)
    return pv, least, n1, known_n - n1


def _light(p: Predicate, y: np.ndarray, p_value: float) -> TwoByTwo:
    """A folded family's table without the exact odds-ratio interval (computed only for
    those that pass, see rank): counts, the family's p, the relative risk."""
    a, n1, c, n0 = _counts(p.exposed, p.known, y)
    rr, lo, hi = relative_risk(a, n1, c, n0)
    return TwoByTwo(a, n1, c, n0, p_value, rr, lo, hi, None)


def _screen(
    p: Predicate, y: np.ndarray, table: Table, level: float, min_support: int
) -> TwoByTwo | str:
    """The predicate's table, or why it is not tested (never from the outcome: its
    margins, and the smallest p they allow)."""
    n_with = int((p.exposed & p.known).sum())
    n_without = int((p.known & ~p.exposed).sum())
    if n_with < min_support:
        return f"fewer than {min_support} requests with it"
    if n_without == 0:
        return "every request has it"
    k = int(y[p.known].sum())
    if p.per_run:
        return _per_run(p, y, table, level)
    margins = Hypergeom(n_with, n_without, k)
    least = margins.least_p()
    if least >= level:
        return f"its margins allow no p below {least:.2g} (Tarone)"
    return _oriented(p, y, margins)


def _counts(exposed: np.ndarray, known: np.ndarray, y: np.ndarray) -> tuple[int, int, int, int]:
    w = exposed & known
    wo = known & ~exposed
    return int((w & y).sum()), int(w.sum()), int((wo & y).sum()), int(wo.sum())


def _orient(p: Predicate, y: np.ndarray) -> tuple[int, int, int, int]:
    """A two-level factor is one question: asked of the level with the higher rate (the
    other's table is this one mirrored, with the same p). Its counts."""
    a, n1, c, n0 = _counts(p.exposed, p.known, y)
    if p.mirror and a * n0 < c * n1:
        p.level, p.text = p.mirror
        p.exposed = p.known & ~p.exposed
        p.runs_with, p.runs_without = p.runs_without, p.runs_with
        a, n1, c, n0 = c, n0, a, n1
    return a, n1, c, n0


def _oriented(p: Predicate, y: np.ndarray, margins: Hypergeom) -> TwoByTwo:
    a, n1, c, n0 = _orient(p, y)
    # mirrored, the exposed row's margins swap: the distribution given is the other's
    return two_by_two(a, n1, c, n0, margins if n1 == margins.n1 else None)


def _per_run(p: Predicate, y: np.ndarray, table: Table, level: float) -> TwoByTwo | str:
    """Runs as the units: every run with it against every run without; the p of the
    weakest pair, and that pair's table (interval and p agree)."""
    a_all, n_with, c_all, n_without = _orient(p, y)  # pooled counts: no statistics needed
    per = {r: (int(y[table.run == r].sum()), int((table.run == r).sum()))
           for r in p.runs_with + p.runs_without}  # fmt: skip
    names = [(a, b) for a in p.runs_with for b in p.runs_without]
    pairs = [(per[a], per[b]) for a, b in names]
    least = max(Hypergeom(n1, n0, a + c).least_p() for (a, n1), (c, n0) in pairs)
    if least >= level:
        return f"its runs allow no p below {least:.2g} (Tarone, runs as the units)"
    tables = [two_by_two(a, n1, c, n0) for (a, n1), (c, n0) in pairs]
    higher = [t.exposed_cases * t.control_total > t.control_cases * t.exposed_total
              for t in tables]  # fmt: skip
    i = max(range(len(tables)), key=lambda i: tables[i].p_value or 1.0)
    weakest = tables[i]
    p.weakest_pair = names[i]
    if len(tables) > 1 and len(set(higher)) > 1:  # the pairs disagree on the direction
        weakest.p_value = 1.0
    weakest.exposed_cases, weakest.exposed_total = a_all, n_with
    weakest.control_cases, weakest.control_total = c_all, n_without
    return weakest


def _strata(table: Table) -> tuple[np.ndarray | None, list[tuple[float, float, int]]]:
    """Each request's load stratum (-1: concurrency not known), or None with one stratum."""
    conc = table.columns.get("concurrency")
    return (None, []) if conc is None else load_strata(conc)


def load_strata(conc: np.ndarray) -> tuple[np.ndarray | None, list[tuple[float, float, int]]]:
    """Quintiles of concurrency, the thinnest merged with a neighbour until each holds
    MIN_STRATUM requests: each request's stratum (-1: not known), and each stratum's
    (lowest, highest, requests); None where fewer than two strata stand."""
    known = ~np.isnan(conc)
    if known.sum() < 2 * MIN_STRATUM:
        return None, []
    values = conc[known]
    edges = np.unique(np.quantile(values, np.arange(1, STRATA) / STRATA, method="inverted_cdf"))
    idx = np.searchsorted(edges, values, side="right")
    groups = [list(np.flatnonzero(idx == i)) for i in range(len(edges) + 1)]
    groups = [g for g in groups if g]
    while len(groups) > 1:  # merge the thinnest with its thinner neighbour
        thin = min(range(len(groups)), key=lambda i: len(groups[i]))
        if len(groups[thin]) >= MIN_STRATUM:
            break
        left = len(groups[thin - 1]) if thin > 0 else math.inf
        right = len(groups[thin + 1]) if thin + 1 < len(groups) else math.inf
        other = thin - 1 if left <= right else thin + 1
        lo, hi = sorted((thin, other))
        groups[lo : hi + 1] = [groups[lo] + groups[hi]]
    if len(groups) < 2:
        return None, [(float(values.min()), float(values.max()), len(values))]
    stratum = np.full(len(conc), -1)
    rows = np.flatnonzero(known)
    bounds = []
    for i, g in enumerate(groups):
        stratum[rows[g]] = i
        bounds.append((float(values[g].min()), float(values[g].max()), len(g)))
    return stratum, bounds


def _busiest_tags(table: Table) -> dict[str, str]:
    """The tags of the run with the most judged requests: its header's url, sessions and
    rounds are what the experiment runs against."""
    if not len(table) or not table.run_tags:
        return {}
    names, counts = np.unique(table.run.astype(str), return_counts=True)
    return table.run_tags.get(str(names[int(np.argmax(counts))]), {})


def _minutes(table: Table) -> np.ndarray | None:
    """Each request's stratum: its run's minute and its anchor's kind, as a dense code
    (-1: not known), or None without send times."""
    secs = table.columns.get("seconds_into_run")
    if secs is None or np.isnan(secs).all():
        return None
    _, run = np.unique(table.run.astype(str), return_inverse=True)
    minute = np.where(np.isnan(secs), -1, secs // 60).astype(np.int64)
    if table.anchor is not None:  # and its anchor's kind: a transfer's end is not a send
        _, kind = np.unique(table.anchor.astype(str), return_inverse=True)
        run = run * (int(kind.max(initial=0)) + 1) + kind
    key = np.where(minute >= 0, run * (int(minute.max()) + 1) + minute, -1)
    _, dense = np.unique(key, return_inverse=True)
    return np.where(key >= 0, dense - int((key < 0).any()), -1)


def _in_time(p: Predicate, y: np.ndarray, minutes: np.ndarray | None) -> float | None:
    """Mantel–Haenszel p of the predicate within one-minute strata (None: no strata)."""
    if minutes is None:
        return None
    inside = p.known & (minutes >= 0)
    s, e, o = minutes[inside], p.exposed[inside], y[inside]
    k = int(minutes.max()) + 1
    cells = [np.bincount(s, weights=w, minlength=k)
             for w in (e & o, e & ~o, ~e & o, ~e & ~o)]  # fmt: skip
    return mantel_haenszel_arrays(*cells)[1]


def _order(s: Suspect) -> tuple:
    """Verdict first (suspects, then those load explains, …), then a factor before a
    measure of load (a suspect that holds within load strata heads load's own measures),
    then q, then the lower bound of the relative risk's interval, then coverage."""
    return (TIERS[s.verdict], s.load, s.q, -(s.table.rr_low or 0.0), -s.covers)


def _stratified(
    p: Predicate, y: np.ndarray, strata: np.ndarray | None, crude: tuple, level: float
) -> Stratified | None:
    """The predicate within load strata (Mantel–Haenszel); `crude`: its q and its table.
    A significant pooled odds ratio on the other side of 1 from the crude one is said as
    such: it is never "holds" (issue 51: crude OR 2.0, 0 of 74 exposed corrupted within
    the strata, was called a suspect)."""
    q, t = crude
    if strata is None:
        return None
    if p.feature == "concurrency":
        return Stratified(None, None, "the strata themselves")
    if p.load:  # stratified by itself: no p to read (docs/investigations.md)
        return Stratified(None, None, "a measure of load itself")
    k = int(strata.max()) + 1
    inside = p.known & (strata >= 0)
    s = strata[inside]
    e, o = p.exposed[inside], y[inside]
    a = np.bincount(s, weights=e & o, minlength=k)
    b = np.bincount(s, weights=e & ~o, minlength=k)
    c = np.bincount(s, weights=~e & o, minlength=k)
    d = np.bincount(s, weights=~e & ~o, minlength=k)
    pooled, mh_p = mantel_haenszel(
        [tuple(int(v) for v in row) for row in zip(a, b, c, d, strict=True)]
    )
    if mh_p is None:
        return Stratified(pooled, None, "no stratum has both")
    return Stratified(pooled, mh_p, _within_strata(q, t.odds_ratio, pooled, mh_p, level))


def _within_strata(q: float, crude: float | None, pooled: float | None, mh_p: float,
                   level: float) -> str:  # fmt: skip
    """What the strata say: "holds" only with the pooled OR on the crude one's side and
    MH p < level; the other side is said as reversed or masked."""
    if mh_p >= level:
        return LOAD if q < level else "not significant within load strata either"
    side, within = _side(crude), _side(pooled)
    if side != 0 and within == side:
        return HOLDS
    if side != 0 and within == -side:
        return REVERSED if side > 0 else MASKED
    return "no pooled odds ratio on either side of 1"


def _side(odds_ratio: float | None) -> int:
    """Which side of 1 an odds ratio lies on: 1 above, -1 below, 0 at 1 or unknown."""
    if odds_ratio is None or odds_ratio != odds_ratio or odds_ratio == 1:
        return 0
    return 1 if odds_ratio > 1 else -1


def _verdict(
    t: TwoByTwo, q: float, s: Stratified | None, level: float, p: Predicate | None = None
) -> str:
    if q >= level:
        return NOISE
    if not t.interval_agrees:
        return BORDERLINE
    if s is not None and s.verdict == LOAD:
        return LOAD
    if s is not None and s.verdict in (REVERSED, MASKED):
        return s.verdict
    if _side(t.odds_ratio) < 0:
        return LESS
    if p is not None and p.after:
        return AFTER
    if p is not None and p.occurrences is not None and p.occurrences < MIN_OCCURRENCES:
        return ANECDOTAL
    return SUSPECT


def _group(ranked: list[tuple[Suspect, Predicate]], y: np.ndarray) -> None:
    """Number each line; a predicate whose corrupted requests nearly coincide (Jaccard ≥
    0.8) with a better-ranked line's, with the same verdict, joins that line."""
    leaders: list[tuple[int, Suspect]] = []
    lines = 0
    for s, p in ranked:
        if p.family is not None and s.verdict == NOISE:  # a quiet family member: its own
            lines += 1  # line, never compared (an incident has a thousand of them)
            s.group = lines
            continue
        # the corrupted requests it covers as the bits of one integer: a pair's overlap
        # is two popcounts, not two passes over every request
        mine = int.from_bytes(np.packbits((p.exposed & p.known)[y]).tobytes(), "big")
        for theirs, lead in leaders:
            union = (mine | theirs).bit_count()
            if (
                union
                and (mine & theirs).bit_count() / union >= JACCARD
                and lead.verdict == s.verdict
            ):
                s.group = lead.group
                lead.members.append(s.predicate)
                break
        else:
            lines += 1
            s.group = lines
            leaders.append((mine, s))
