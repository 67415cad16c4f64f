"""Since when: one change point in the corruption rate, with its p and an interval.

The scan: for each split τ of the judged requests in send order (and again in the
harness's order, the request ordinal, where the two differ), each side holding at least
MIN_SIDE of them, the Cochran–Mantel–Haenszel statistic of before against after within
strata: one degree of freedom, the rate ratio of the change, a rise only (an onset). The
statistic is the largest over τ and the axes (one test). A stratum is a load stratum
(`suspects`' quintiles of concurrency) within a load level (stretches of the run at one
level of load, found on concurrency over time): a rate that steps with the load is the
load's (a quintile straddling two levels read the load's step as an onset).

One degree of freedom, not one a stratum: a likelihood ratio of a rate before and after
within each stratum spread the one change over every stratum (bench/README.md's row).

Its p: the same maximum in PERMUTATIONS shuffles of the outcomes within each stratum and
session (a session's own rate and the load's stay; only the order goes), over GRID
splits. The interval: the 2.5–97.5 % quantiles of τ re-estimated on BOOTSTRAP replicates
drawn from the fitted model (each stratum's rate before, one rate ratio after). Where the
interval holds a change of the load level, the report says the onset cannot be told from
the load change there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..scope import Db, Runs, Scope, scoped
from ..statuses import UNJUDGED_SQL
from ..timefmt import iso_us as utc

MIN_SIDE = 0.05  # each side of a split holds at least this share of the judged requests
PERMUTATIONS = 999
BOOTSTRAP = 200  # incidents drawn at each split the interval tests
SHORTFALL_CAP = 30.0  # a split further below the best is never in the interval
CANDIDATES = 16  # splits tested evenly among the plausible ones …
EDGE_STEPS = 5  # … then each edge bisected
ALPHA = 0.05
MIN_REQUESTS = 40  # fewer judged requests: nothing is scanned
# a load phase: a stretch of at least MIN_SIDE of the requests whose mean concurrency
# differs from its neighbour's by more than PHASE_SD within-phase standard deviations
PHASE_SD = 2.0
MAX_PHASES = 32
# the test's splits: at most this many, evenly spaced (the estimate reads every split); at
# 10 k requests a split every 18: the permutations' cost is the grid's, not the requests'
GRID = 500
AXES = ("send time", "request ordinal")


@dataclass
class Onset:
    """The change point, or why there is none. `ts_us`: the send time of the first
    request after it; `ci_us`: its 95 % interval."""

    requests: int
    corrupted: int
    p: float | None = None
    axis: str | None = None
    ts_us: int | None = None
    request_ordinal: int | None = None
    ci_us: tuple[int, int] | None = None
    rate_before: float | None = None
    rate_after: float | None = None
    permutations: int = 0
    phases: list[int] = field(default_factory=list)  # load phase edges, µs
    with_load: int | None = None  # a load change inside the interval (µs)
    why_not: str | None = None

    @property
    def found(self) -> bool:
        return self.p is not None and self.p < ALPHA

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ci_us"] = list(self.ci_us) if self.ci_us else None
        return d

    def headline(self) -> str | None:
        if not self.found or self.ts_us is None or self.ci_us is None:
            return None
        lo, hi = self.ci_us
        return (f"corruption began at {utc(self.ts_us)} (95 % interval {utc(lo)} – {utc(hi)}; "
                f"{_pct(self.rate_before)} before, {_pct(self.rate_after)} after, "
                f"p = {_p(self.p)}, within load strata)")  # fmt: skip

    def sentences(self, role: str | None = None, marked: bool = False) -> list[str]:
        """The onset in sentences; `role`: what it is beside the report's verdict ("the
        verdict": its statement said it already, left out; else named beside its time);
        `marked`: a failure inside the interval marks the change (no load change to
        disown it for)."""
        if self.why_not:
            return [f"onset: not scanned: {self.why_not}"]
        out = [h] if (h := self.headline()) else []
        if role == "the verdict":
            out = []
        elif role and out:
            out = [f"the onset scan's change point ({role}, not the verdict's time): {out[0]}"]
        if not self.found and self.p is not None:
            out.append(f"onset: no change in the corruption rate within load strata "
                       f"(p = {_p(self.p)}, {self.permutations} permutations)")  # fmt: skip
        if self.with_load is not None and not marked:
            out.append(
                f"the load changed at {utc(self.with_load)}, inside the onset's interval: the "
                "onset cannot be told from the load change there"
            )
        return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _p(p: float | None) -> str:
    return "n/a" if p is None else ("< 0.001" if p < 0.001 else f"{p:.3f}")


def onset(db: Db = None, run: Runs = None, seed: int = 0) -> Onset:
    with scoped(db, run) as s:
        return s.memo(("onset", tuple(s.runs), seed), lambda: _onset(s, seed))


def _onset(s: Scope, seed: int) -> Onset:
    where, params = s.where()
    got = s.con.execute(
        f"""SELECT start_us, concurrency, session, corrupted FROM results
            WHERE {where} AND NOT {UNJUDGED_SQL} AND start_us IS NOT NULL
            ORDER BY run, source_id, line""",
        params,
    ).fetchnumpy()
    t = np.asarray(got["start_us"], dtype=np.int64)
    conc = np.asarray(np.ma.filled(np.ma.asarray(got["concurrency"], dtype=float), np.nan))
    session = np.asarray(np.ma.filled(np.ma.asarray(got["session"]).astype(object), ""))
    y = np.asarray(np.ma.filled(got["corrupted"], False), dtype=bool)
    return scan(t, y, conc, session, seed=seed)


def scan(
    t: np.ndarray,
    y: np.ndarray,
    concurrency: np.ndarray,
    session: np.ndarray,
    *,
    permutations: int = PERMUTATIONS,
    bootstrap: int = BOOTSTRAP,
    seed: int = 0,
    always: bool = False,
) -> Onset:
    """The change point of `y` (corrupted) over requests in the harness's order, sent at
    `t` (µs) at `concurrency` (NaN: not known) in `session`; its interval where an onset
    is found (`always`: where none is too; `bootstrap` 0: never)."""
    n, k = len(y), int(np.sum(y))
    out = Onset(n, k)
    if n < MIN_REQUESTS or k == 0 or k == n:
        few = f"{n} judged requests (at least {MIN_REQUESTS} are needed)"
        out.why_not = few if n < MIN_REQUESTS else "the rate is the same everywhere (0 or all)"
        return out
    rng = np.random.default_rng(seed)
    by_time = np.argsort(t, kind="stable")
    phase, edges = _phases(concurrency, by_time)
    out.phases = [int(t[by_time[i]]) for i in edges]
    load = load_strata(concurrency)
    strata = _codes(load * (len(edges) + 1) + phase)
    # the harness's order is its send order where requests were sent one after another:
    # one axis then, not two tests of the same splits
    orders = (by_time,) if np.array_equal(by_time, np.arange(n)) else (by_time, np.arange(n))
    grid = _splits(n, GRID)
    tested = max(float(_curve(y[None, o], strata[o], n, grid).max()) for o in orders)
    sessions = _codes(session)
    cells = _codes(strata * (int(sessions.max()) + 1) + sessions)
    null = _null_max(y, cells, strata, orders, grid, permutations, rng)
    out.p = float((1 + np.sum(null >= tested - 1e-9)) / (1 + permutations))
    out.permutations = permutations
    order, curve = _estimate(out, t, y, strata, orders)
    if not bootstrap or not (always or out.found):
        return out  # the estimate and its p only: an interval of no onset says nothing
    # its own stream: the interval does not move with the number of permutations
    out.ci_us = _interval(t, y, strata, order, curve, bootstrap,
                          np.random.default_rng([seed, 1]))  # fmt: skip
    out.with_load = _with_load(out)
    return out


def _estimate(
    out: Onset, t: np.ndarray, y: np.ndarray, strata: np.ndarray, orders: tuple[np.ndarray, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """The best split over every split of each axis, into `out` (its axis, the first
    request after it, the rates on either side); the axis' order and statistic curve."""
    n = len(y)
    observed = [_curve(y[None, o], strata[o], n)[0] for o in orders]  # every split
    axis = int(np.argmax([c.max() for c in observed]))
    order = orders[axis]
    split = int(np.argmax(observed[axis])) + 1  # requests before the change, in `order`
    out.axis = AXES[axis]
    first = order[split]
    out.ts_us, out.request_ordinal = int(t[first]), int(first)
    before = np.zeros(n, bool)
    before[order[:split]] = True
    out.rate_before = float(y[before].mean())
    out.rate_after = float(y[~before].mean())
    return order, observed[axis]


def _codes(values: np.ndarray) -> np.ndarray:
    return np.unique(np.asarray(values), return_inverse=True)[1].astype(np.int64)


def load_strata(concurrency: np.ndarray) -> np.ndarray:
    """`suspects`' load strata (quintiles of concurrency; not known: a stratum of its own)."""
    from .suspects.rank import load_strata as quintiles

    stratum, _ = quintiles(np.asarray(concurrency, dtype=float))
    return np.zeros(len(concurrency), np.int64) if stratum is None else stratum + 1


def _phases(concurrency: np.ndarray, by_time: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Each request's load level and the edges where the level changes (positions in send
    order). Binary segmentation of concurrency over send time (a split kept where the two
    sides' means differ by more than PHASE_SD of their spread), then the stretches grouped
    into levels by their means: a load that comes back (low, high, low) is one level, so
    a stratum compares its requests before and after a change across the stretches."""
    c = concurrency[by_time]
    known = ~np.isnan(c)
    if known.sum() < MIN_REQUESTS:
        return np.zeros(len(c), np.int64), []
    c = np.where(known, c, np.nanmedian(c))
    least = max(int(MIN_SIDE * len(c)), 2)
    edges: list[int] = []
    todo = [(0, len(c))]
    while todo and len(edges) < MAX_PHASES - 1:
        lo, hi = todo.pop()
        at = _split(c[lo:hi], least)
        if at is not None:
            edges.append(lo + at)
            todo += [(lo, lo + at), (lo + at, hi)]
    edges.sort()
    stretch = np.searchsorted(np.asarray(edges, dtype=np.int64), np.arange(len(c)), side="right")
    level = _levels(c, stretch)
    changes = [e for e in edges if level[e] != level[e - 1]]
    phase = np.empty(len(c), np.int64)
    phase[by_time] = level
    return phase, changes


def _levels(c: np.ndarray, stretch: np.ndarray) -> np.ndarray:
    """Each request's load level: stretches whose means lie within PHASE_SD of the
    within-stretch spread of the lowest of a level are one level."""
    count = np.bincount(stretch).astype(float)
    mean = np.bincount(stretch, weights=c) / count
    resid = c - mean[stretch]
    sd = float(np.sqrt(np.sum(resid * resid) / max(len(c) - len(count), 1)))
    level_of = np.zeros(len(count), np.int64)
    first, level = None, -1
    for i in np.argsort(mean, kind="stable"):
        if first is None or mean[i] - first > PHASE_SD * sd:
            first, level = mean[i], level + 1
        level_of[i] = level
    return level_of[stretch]


def _split(c: np.ndarray, least: int) -> int | None:
    """The best mean-shift split of c, if its sides differ by more than PHASE_SD."""
    n = len(c)
    if n < 2 * least:
        return None
    s1, s2 = np.cumsum(c), np.cumsum(c * c)
    i = np.arange(least, n - least + 1)
    left_n, right_n = i, n - i
    left_m = s1[i - 1] / left_n
    right_m = (s1[-1] - s1[i - 1]) / right_n
    sse = (s2[i - 1] - left_n * left_m**2) + (s2[-1] - s2[i - 1] - right_n * right_m**2)
    j = int(np.argmin(sse))
    sd = np.sqrt(max(sse[j], 0.0) / max(n - 2, 1))
    if sd == 0.0:
        return int(i[j]) if left_m[j] != right_m[j] else None
    return int(i[j]) if abs(left_m[j] - right_m[j]) > PHASE_SD * sd else None


def _xlogx(a: np.ndarray, n: np.ndarray) -> np.ndarray:
    """a·log(a/n), 0 where a is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a > 0, a * np.log(np.where(a > 0, a, 1) / np.where(n > 0, n, 1)), 0.0)


def _ll(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    return _xlogx(k, n) + _xlogx(n - k, n)


def _curve(y: np.ndarray, strata: np.ndarray, n: int, at: np.ndarray | None = None) -> np.ndarray:
    """The Cochran–Mantel–Haenszel statistic of each split (R × n − 1; column j: the first
    j + 1 requests before) for outcome rows `y` (R × n, in the axis's order) and each
    request's stratum (in that order): before against after within strata, one degree of
    freedom (one rate ratio, the change), a rise only (fewer corrupted before than
    expected: corruption began; a fall is 0). A split leaving fewer than MIN_SIDE on a
    side is 0. `at`: only these columns, in their order (R × len(at))."""
    if at is None:
        at = _splits(n)
        out = np.zeros((y.shape[0], n - 1))
        if len(at):
            out[:, at] = _curve(y, strata, n, at)
        return out
    return _Design(_codes(strata)).curve(y, at)


def _splits(n: int, most: int | None = None) -> np.ndarray:
    """The splits with at least MIN_SIDE of the requests on each side (curve columns),
    at most `most` of them evenly spaced."""
    least = max(int(np.ceil(MIN_SIDE * n)), 1)
    at = np.arange(least - 1, n - least)
    if most is not None and len(at) > most:
        at = at[np.linspace(0, len(at) - 1, most).round().astype(np.int64)]
    return at


def _null_max(
    y: np.ndarray,
    cells: np.ndarray,
    strata: np.ndarray,
    orders: tuple[np.ndarray, ...],
    grid: np.ndarray,
    permutations: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """The statistic's maximum over the `grid`'s splits and the axes in each permutation
    of the outcomes within cells (each within one stratum).

    A cell's corrupted count stays, so does each stratum's, and the statistic's expected
    counts and variance with them: a permutation only moves which of a cell's requests
    are the corrupted ones. So each draws those (k of a cell's m) and counts them before
    each split: the work is the corrupted requests', not every request's (a shuffled
    copy of the outcomes a permutation, summed cumulatively, was 0.9 s at 10 k)."""
    order = np.argsort(cells, kind="stable")
    drawn, fixed = [], [np.zeros(0, np.int64)]
    for idx in np.split(order, np.flatnonzero(np.diff(cells[order])) + 1):
        k = int(y[idx].sum())
        if k == len(idx):
            fixed.append(idx)  # every one corrupted: no choice
        elif k:
            keys = rng.random((permutations, len(idx)))
            drawn.append(idx[np.argpartition(keys, k - 1, axis=1)[:, :k]])
    chosen = np.concatenate(drawn, axis=1) if drawn else np.zeros((permutations, 0), np.int64)
    return _max_over(chosen, np.concatenate(fixed), y, strata, orders, grid)


def _max_over(
    chosen: np.ndarray,
    steady: np.ndarray,
    y: np.ndarray,
    strata: np.ndarray,
    orders: tuple[np.ndarray, ...],
    grid: np.ndarray,
) -> np.ndarray:
    """The statistic's maximum for each row of `chosen` (the requests a permutation makes
    corrupted, beside the `steady` ones every permutation does)."""
    n, rows = len(y), len(chosen)
    best = np.zeros(rows)
    for o in orders:
        rank = np.empty(n, np.int64)
        rank[o] = np.arange(n)
        u0, v = _moments(y, strata[o], n, grid, o)
        # the first split each is before-or-at: a table over ranks, gathered (a binary
        # search of each drawn request was a third of the scan at 10 k requests)
        at = np.searchsorted(grid, np.arange(n))[rank[chosen]]
        g = len(grid) + 1
        flat = (np.arange(rows)[:, None] * g + at).ravel()
        counts = np.bincount(flat, minlength=rows * g).reshape(rows, g)
        before = np.cumsum(counts, axis=1)[:, :-1].astype(np.float64)
        before += np.searchsorted(np.sort(rank[steady]), grid, side="right")[None, :]
        u = np.minimum(before - u0[None, :], 0.0)
        best = np.maximum(best, (u * u / v[None, :]).max(axis=1))
    return best


def _moments(
    y: np.ndarray, strata: np.ndarray, n: int, grid: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each split's expected corrupted count before it and the count's variance, under
    the strata's rates (the same in every permutation within cells within strata)."""
    codes = _codes(strata)
    onehot = np.zeros((n, int(codes.max()) + 1))
    onehot[np.arange(n), codes] = 1.0
    size = onehot.sum(axis=0)
    k = y[order].astype(np.float64) @ onehot
    b = np.cumsum(onehot, axis=0)[grid]
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(size > 1, k * (size - k) / (size * size * (size - 1)), 0.0)
    v = (b * (size - b)) @ w
    v[v <= 0] = np.inf
    return b @ (k / size), v


def _fitted(y: np.ndarray, codes: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Each request's corruption rate under a change at `before`: each stratum's rate
    before, times one rate ratio after (Mantel–Haenszel's, the statistic's own; a rate a
    stratum before and after made thin strata's rates 0 or 1, the change too sharp)."""
    size = np.bincount(codes).astype(float)
    n_b = np.bincount(codes, weights=before.astype(float), minlength=len(size))
    c = np.bincount(codes, weights=(y & before).astype(float), minlength=len(size))
    a = np.bincount(codes, weights=(y & ~before).astype(float), minlength=len(size))
    n_a = size - n_b
    bottom = float(np.sum(c * n_a / size))
    ratio = float(np.sum(a * n_b / size)) / bottom if bottom > 0 else 1.0
    ratio = ratio if np.isfinite(ratio) and ratio > 0 else 1.0
    base = (a + c) / (n_b + ratio * n_a)
    return np.where(before, base[codes], np.minimum(base[codes] * ratio, 1.0))


def _interval(
    t: np.ndarray,
    y: np.ndarray,
    strata: np.ndarray,
    order: np.ndarray,
    observed: np.ndarray,
    replicates: int,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """τ's 95 % confidence set by test inversion (send times, µs): a split τ₀ is in it
    when the statistic's shortfall there, max − S(τ₀), is within the 95th percentile of
    the shortfall at τ₀ in `replicates` incidents drawn with the change at τ₀ (each
    stratum's rate before it, one rate ratio after). A bootstrap around the estimate
    measured how far the estimator scatters about itself, not from the truth: late
    estimates gave late intervals (73 % coverage on onsets of shapes it was not tuned on,
    bench/README.md). Candidates: every split whose shortfall is below SHORTFALL_CAP, at
    most CANDIDATES of them evenly and the estimate, the set's two edges then bisected."""
    n = len(y)
    codes = _codes(strata)[order]
    ys = y[order]
    grid = _splits(n, GRID)
    design = _Design(codes)
    # the observed shortfall against the same splits the replicates' is taken over
    shortfall = observed[grid].max() - observed
    plausible = np.flatnonzero(shortfall <= SHORTFALL_CAP)
    noise = rng.random((replicates, n), dtype=np.float32)  # the same draws at every τ₀

    def accepted(j: int) -> bool:
        p = _fitted(ys, codes, np.arange(n) <= j).astype(np.float32)
        stat = design.curve(noise < p[None, :], np.append(grid, j))
        short = stat[:, :-1].max(axis=1) - stat[:, -1]
        return bool(shortfall[j] <= np.quantile(short, 1 - ALPHA))

    best = int(np.argmax(observed))  # the estimate: in the set by construction
    coarse = np.union1d(plausible[np.linspace(0, len(plausible) - 1, min(
        CANDIDATES, len(plausible))).round().astype(np.int64)], [best])  # fmt: skip
    inside = [best, *(j for j in coarse if j != best and accepted(int(j)))]
    lo = _edge(coarse, min(inside), -1, accepted)
    hi = _edge(coarse, max(inside), 1, accepted)
    return int(t[order][lo + 1]), int(t[order][hi + 1])


class _Design:
    """The strata's one-hot design in the axis' order, kept for many outcome matrices:
    `_curve`'s statistic at given splits for R × n outcomes (the interval's replicates
    reuse one design)."""

    def __init__(self, codes: np.ndarray) -> None:
        n = len(codes)
        self.onehot = np.zeros((n, int(codes.max()) + 1), np.float32)
        self.onehot[np.arange(n), codes] = 1.0
        self.size = self.onehot.sum(axis=0).astype(np.float64)
        self.cum = np.cumsum(self.onehot, axis=0, dtype=np.float64)  # n × S

    def curve(self, y: np.ndarray, at: np.ndarray) -> np.ndarray:
        # Σ_s (before's corrupted − before's share of the stratum's) and the hypergeometric
        # variance Σ_s (before × after requests) × the stratum's rate spread: a cumulative
        # sum of the outcomes and two products over the strata (a pass a stratum cost 0.7 s
        # at 10 k requests)
        size, b = self.size, self.cum[at]
        k = (y.astype(np.float32) @ self.onehot).astype(np.float64)
        u = np.cumsum(y, axis=1, dtype=np.int32)[:, at] - (k / size) @ b.T
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(size > 1, k * (size - k) / (size * size * (size - 1)), 0.0)
        v = w @ (b * (size - b)).T
        v[v <= 0] = np.inf
        np.minimum(u, 0.0, out=u)  # a rise only: an onset
        return u * u / v


def _edge(coarse: np.ndarray, edge: int, step: int, accepted) -> int:
    """The set's edge between the outermost accepted candidate and the next one out
    (rejected, or the plausible splits' end): bisected, at most EDGE_STEPS tests."""
    at = int(np.searchsorted(coarse, edge))
    out = at + step
    if out < 0 or out >= len(coarse):
        return edge
    inner, outer = edge, int(coarse[out])
    for _ in range(EDGE_STEPS):
        if abs(outer - inner) <= 1:
            break
        mid = (inner + outer) // 2
        if accepted(mid):
            inner = mid
        else:
            outer = mid
    return inner


def _with_load(found: Onset) -> int | None:
    """The first load change inside the onset's interval: there the onset cannot be told
    from the load's change (the strata compare within a load level, but the interval
    says the change may lie on either side of it)."""
    if not found.found or found.ci_us is None:
        return None
    lo, hi = found.ci_us
    return next((e for e in found.phases if lo <= e <= hi), None)
