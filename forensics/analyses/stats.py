"""The statistics behind the conclusions: 2×2 tables, rates with intervals, in words.

Built on numpy and the standard library alone: importing scipy.stats costs 1.1–1.5 s,
more than a whole `suspects` answer may take. Every function here is tested equal to
scipy.stats or statsmodels (tests/test_stats.py): Fisher's exact test (two-sided, as
scipy sums the tables no likelier than the one seen), the conditional maximum-likelihood
odds ratio with its exact interval (scipy's `odds_ratio(kind="conditional")`), the
relative risk with Katz's interval, Wilson's interval, Holm, Benjamini–Hochberg and
–Yekutieli, and Mantel–Haenszel over strata (statsmodels' `StratifiedTable`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

ALPHA = 0.05  # significance level of every conclusion
Z95 = NormalDist().inv_cdf(0.975)
_TIE = 1 + 1e-7  # tables this close in probability to the one seen count as "as likely"


@dataclass
class TwoByTwo:
    """Exposure × outcome counts with Fisher's exact test, the relative risk and the
    conditional odds ratio (each with its 95 % interval)."""

    exposed_cases: int
    exposed_total: int
    control_cases: int
    control_total: int
    p_value: float | None
    relative_risk: float | None
    rr_low: float | None  # Katz 95 % interval of the relative risk
    rr_high: float | None
    odds_ratio: float | None  # conditional maximum-likelihood estimate
    or_low: float | None = None  # its exact 95 % interval
    or_high: float | None = None

    @property
    def has_odds_ratio(self) -> bool:
        """False for a family of lines that does not pass: only its Simes p is computed
        (suspects' rank._light), no odds ratio or interval."""
        return self.odds_ratio is not None or self.or_low is not None

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA

    @property
    def interval_agrees(self) -> bool:
        """The exact interval excludes 1 exactly when Fisher's p is below the level. They
        are different inversions of the same test, so at the edge they can part; a
        conclusion is drawn only where they agree."""
        excludes = (self.or_low is not None and self.or_low > 1) or (
            self.or_high is not None and self.or_high < 1
        )
        return excludes == self.significant

    def as_dict(self) -> dict:
        return {k: finite(v) for k, v in asdict(self).items()}


def two_by_two(
    exposed_cases: int,
    exposed_total: int,
    control_cases: int,
    control_total: int,
    margins: Hypergeom | None = None,
) -> TwoByTwo:
    """Fisher's exact p (two-sided), the relative risk exposed/control and the conditional
    odds ratio, each with a 95 % interval. Without both groups there is nothing to
    compare: the statistics are None. `margins`: these margins' distribution, where the
    caller has it already."""
    a, n1, c, n0 = exposed_cases, exposed_total, control_cases, control_total
    if n1 == 0 or n0 == 0:
        return TwoByTwo(a, n1, c, n0, None, None, None, None, None)
    h = margins if margins is not None else Hypergeom(n1, n0, a + c)
    rr, rr_lo, rr_hi = relative_risk(a, n1, c, n0)
    or_, or_lo, or_hi = h.odds_ratio(a)
    return TwoByTwo(a, n1, c, n0, h.fisher(a), rr, rr_lo, rr_hi, or_, or_lo, or_hi)


class Hypergeom:
    """The cases among the exposed, given the margins: `n1` exposed, `n0` not, `k` cases.

    Under no association it is hypergeometric; with odds ratio ω, Fisher's noncentral
    hypergeometric. Everything is computed on the log scale over the whole support.
    """

    def __init__(self, n1: int, n0: int, k: int) -> None:
        self.n1, self.n0, self.k = n1, n0, k
        self.lo, self.hi = max(0, k - n0), min(n1, k)
        x = np.arange(self.lo, self.hi + 1)
        lf = log_factorials(n1 + n0)
        self.x = x
        self.logw = lf[n1] - lf[x] - lf[n1 - x] + lf[n0] - lf[k - x] - lf[n0 - k + x]
        self.pmf = np.exp(self.logw - _logsumexp(self.logw))

    def fisher(self, a: int) -> float:
        """Two-sided p: the probability of every table no likelier than this one."""
        seen = self.pmf[a - self.lo]
        return min(1.0, float(self.pmf[self.pmf <= seen * _TIE].sum()))

    def least_p(self) -> float:
        """The smallest two-sided p these margins allow (Tarone): at an end of the support."""
        return min(self.fisher(self.lo), self.fisher(self.hi))

    def _moments(self, theta: float, a: int, upper: bool) -> tuple[float, float, float, float]:
        """With odds ratio e^θ: (mean, variance, P(X ≥ a) or P(X ≤ a), its slope in θ)."""
        lw = self.logw + theta * self.x
        w = np.exp(lw - lw.max())
        total = float(w.sum())
        wx = w * self.x
        mean = float(wx.sum()) / total
        var = float(wx @ self.x) / total - mean * mean
        cut = slice(a - self.lo, None) if upper else slice(None, a - self.lo + 1)
        tail = float(w[cut].sum()) / total
        return mean, var, tail, float(wx[cut].sum()) / total - tail * mean

    def odds_ratio(self, a: int) -> tuple[float | None, float | None, float | None]:
        """The conditional maximum-likelihood odds ratio and its exact 95 % interval
        (each end where one one-sided test has probability 2.5 %)."""
        if self.lo == self.hi:
            return None, None, None
        log_alpha = math.log(ALPHA / 2)

        def mle(t: float) -> tuple[float, float]:
            mean, var, _, _ = self._moments(t, a, True)
            return mean - a, var

        # The tails on the log scale: nearly straight in θ, so Newton takes few steps.
        def low(t: float) -> tuple[float, float]:  # P(X ≥ a) rises with θ
            _, _, sf, slope = self._moments(t, a, True)
            return (math.log(sf) - log_alpha, slope / sf) if sf > 0 else (-math.inf, 1.0)

        def high(t: float) -> tuple[float, float]:  # P(X ≤ a) falls with θ
            _, _, cdf, slope = self._moments(t, a, False)
            return (log_alpha - math.log(cdf), -slope / cdf) if cdf > 0 else (math.inf, 1.0)

        # Woolf's interval (½ added to each cell) as the starting points
        n1, k = self.n1, self.k
        b, c, d = n1 - a, k - a, self.n0 - k + a
        guess = math.log((a + 0.5) * (d + 0.5) / ((b + 0.5) * (c + 0.5)))
        se = Z95 * math.sqrt(1 / (a + 0.5) + 1 / (b + 0.5) + 1 / (c + 0.5) + 1 / (d + 0.5))
        lower = 0.0 if a == self.lo else math.exp(_solve(low, guess - se))
        upper = math.inf if a == self.hi else math.exp(_solve(high, guess + se))
        est = 0.0 if a == self.lo else math.inf if a == self.hi else math.exp(_solve(mle, guess))
        return est, lower, upper


def _solve(f, t: float) -> float:
    """The root in θ = log ω of an increasing f(θ) → (value, slope), from `t`: Newton's
    steps, kept inside the bracket the signs seen so far give, else bisecting it (θ within
    ±745: ω's float range)."""
    lo, hi = -745.0, 745.0
    for _ in range(200):
        v, slope = f(t)
        if v == 0:
            return t
        if v < 0:
            lo = t
        else:
            hi = t
        step = t - v / slope if slope > 0 and math.isfinite(v) else math.nan
        if not lo < step < hi:  # also NaN
            step = (lo + hi) / 2 if hi - lo < 16 else t + (4.0 if v < 0 else -4.0)
        if abs(step - t) < 1e-10 * max(1.0, abs(t)) or hi - lo < 1e-10 * max(1.0, abs(t)):
            return step
        t = step
    return t


def _logsumexp(v: np.ndarray) -> float:
    m = float(v.max())
    return m + math.log(float(np.exp(v - m).sum()))


@lru_cache(maxsize=8)
def _log_factorials(n: int) -> np.ndarray:
    return np.array([math.lgamma(i + 1) for i in range(n + 1)])


def log_factorials(n: int) -> np.ndarray:
    """log k! for k = 0..n (one table per size, grown in steps so sizes share it)."""
    size = 1 << max(6, (n + 1).bit_length())
    return _log_factorials(size)


def relative_risk(
    a: int, n1: int, c: int, n0: int
) -> tuple[float | None, float | None, float | None]:
    """(a/n1) / (c/n0) with Katz's 95 % interval (scipy's conventions where a count is 0:
    the undefined end is None)."""
    if a == 0 and c == 0:
        return None, None, None
    if a == 0:
        return 0.0, 0.0, None
    if c == 0:
        return math.inf, None, math.inf
    rr = (a / n1) / (c / n0)
    d = Z95 * math.sqrt(1 / a - 1 / n1 + 1 / c - 1 / n0)
    return rr, rr * math.exp(-d), rr * math.exp(d)


def mantel_haenszel(tables: list[tuple[int, int, int, int]]) -> tuple[float | None, float | None]:
    """Pooled odds ratio and the Cochran–Mantel–Haenszel p (no continuity correction)
    over strata given as (a, b, c, d): exposed cases, exposed non-cases, unexposed cases,
    unexposed non-cases. Strata of fewer than two requests say nothing and are dropped."""
    num = den = s = e = v = 0.0
    for a, b, c, d in tables:
        n = a + b + c + d
        if n < 2:
            continue
        num += a * d / n
        den += b * c / n
        s += a
        e += (a + b) * (a + c) / n
        v += (a + b) * (c + d) * (a + c) * (b + d) / (n * n * (n - 1))
    if v == 0:
        return None, None
    pooled = num / den if den else (math.inf if num else None)
    chi2 = (s - e) ** 2 / v
    return pooled, math.erfc(math.sqrt(chi2 / 2))  # χ² with one degree of freedom


def mantel_haenszel_arrays(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
) -> tuple[float | None, float | None]:
    """`mantel_haenszel` over strata given as four arrays (one entry a stratum)."""
    a, b, c, d = (np.asarray(x, dtype=float) for x in (a, b, c, d))
    n = a + b + c + d
    keep = n >= 2
    a, b, c, d, n = a[keep], b[keep], c[keep], d[keep], n[keep]
    v = float(((a + b) * (c + d) * (a + c) * (b + d) / (n * n * (n - 1))).sum())
    if v == 0:
        return None, None
    num, den = float((a * d / n).sum()), float((b * c / n).sum())
    pooled = num / den if den else (math.inf if num else None)
    chi2 = (float(a.sum()) - float(((a + b) * (a + c) / n).sum())) ** 2 / v
    return pooled, math.erfc(math.sqrt(chi2 / 2))


def wilson(k: int, n: int) -> tuple[float | None, float | None]:
    """Wilson 95 % interval of a proportion k/n (None without trials)."""
    if n == 0:
        return None, None
    z2 = Z95 * Z95
    centre = (k + z2 / 2) / (n + z2)
    half = Z95 / (n + z2) * math.sqrt(k * (n - k) / n + z2 / 4)
    return max(0.0, centre - half), min(1.0, centre + half)


def normal_ppf(q: float) -> float:
    return NormalDist().inv_cdf(q)


POWER = 0.8  # for "requests needed": the chance of seeing a difference that is there


def requests_needed(p1: float, p2: float) -> int | None:
    """Requests per group for a two-sided test at ALPHA to tell rate p1 from p2 with
    POWER (normal approximation for two proportions)."""
    if p1 == p2:
        return None
    za, zb = normal_ppf(1 - ALPHA / 2), normal_ppf(POWER)
    pbar = (p1 + p2) / 2
    num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return math.ceil(num**2 / (p1 - p2) ** 2)


def holm(p_values: list[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order): several pairs, one error rate."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def fdr(p_values: list[float], dependent: bool = False) -> list[float]:
    """Benjamini–Hochberg q-values (same order); Benjamini–Yekutieli's when the tests may
    depend on each other in any way (`dependent`)."""
    m = len(p_values)
    if m == 0:
        return []
    scale = sum(1 / i for i in range(1, m + 1)) if dependent else 1.0
    order = sorted(range(m), key=lambda i: p_values[i], reverse=True)
    out = [0.0] * m
    running = 1.0
    for k, i in enumerate(order):
        running = min(running, p_values[i] * m * scale / (m - k))
        out[i] = min(1.0, running)
    return out


def fmt_p(p: float | None, name: str = "p") -> str:
    if p is None:
        return f"{name} n/a"
    if p < 1e-6:
        return f"{name} < 1e-6"
    return f"{name} = {p:.2g}" if p < 0.01 else f"{name} = {p:.2f}"


def fmt_num(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞"
    return f"{x:.2g}" if abs(x) < 10 else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def fmt_ci(low: float | None, high: float | None) -> str:
    return f"95 % CI {fmt_num(low)}–{fmt_num(high)}"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def finite(v: object) -> object:
    """JSON numbers only: NaN and ±inf (an estimate without a bound) are null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, np.floating | np.integer):
        return finite(v.item())
    return v


def beta_inc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (a, b > 0), by its continued
    fraction (Lentz), O(√(a + b)) terms: binomial tails without summing every term."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - beta_inc(b, a, 1 - x)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1) < 1e-14:
            break
    return front * f / a


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return beta_inc(k, n - k + 1, p)


def binom_lower(k: int, n: int, level: float = ALPHA) -> float:
    """The one-sided Clopper–Pearson lower bound of a proportion k/n at 1 − level."""
    if k <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # P(X ≥ k | p) rises with p: the p where it reaches `level`
        mid = (lo + hi) / 2
        if binom_sf(k, n, mid) < level:
            lo = mid
        else:
            hi = mid
    return lo


def fisher_many(
    a: np.ndarray, n1: np.ndarray, c: np.ndarray, n0: np.ndarray, cells: int = 1 << 21
) -> tuple[np.ndarray, np.ndarray]:
    """Fisher's two-sided p of many 2×2 tables at once, and the smallest p each one's
    margins allow (Tarone): the hypergeometric supports of a chunk of tables as one padded
    matrix (about `cells` entries), not a Python loop per table. Without both groups: 1.

    Tables that share their margins share their distribution: it is computed once a set
    of margins (an incident's thousands of line predicates have a few hundred)."""
    a, n1, c, n0 = (np.asarray(v, dtype=np.int64).reshape(-1) for v in (a, n1, c, n0))
    p, least = np.ones(len(a)), np.ones(len(a))
    if not len(a):
        return p, least
    margins, inv = np.unique(np.stack([n1, a + c, n0], axis=1), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    width = int(np.minimum(margins[:, 0], margins[:, 1]).max()) + 1
    step = max(1, cells // width)
    for i in range(0, len(margins), step):
        rows = (inv >= i) & (inv < i + step)
        p[rows], least[rows] = _fisher_chunk(margins[i : i + step], a[rows], inv[rows] - i)
    return p, least


def _fisher_chunk(
    margins: np.ndarray, a: np.ndarray, row: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The tables `a` (cases exposed) whose margins (n1, k, n0) are `margins[row]`."""
    n1, k, n0 = margins[:, 0], margins[:, 1], margins[:, 2]
    lo, hi = np.maximum(0, k - n0), np.minimum(n1, k)
    width = int((hi - lo).max(initial=0)) + 1
    x = lo[:, None] + np.arange(width)[None, :]
    inside = x <= hi[:, None]
    xs = np.where(inside, x, lo[:, None])
    lf = log_factorials(int((n1 + n0).max(initial=0)))
    logw = (lf[n1][:, None] - lf[xs] - lf[n1[:, None] - xs] + lf[n0][:, None]
            - lf[k[:, None] - xs] - lf[n0[:, None] - k[:, None] + xs])  # fmt: skip
    logw = np.where(inside, logw, -np.inf)
    top = logw.max(axis=1, keepdims=True)
    w = np.exp(logw - top)
    pmf = w / w.sum(axis=1, keepdims=True)

    def p_at(pmf: np.ndarray, col: np.ndarray) -> np.ndarray:
        seen = np.take_along_axis(pmf, col[:, None], axis=1)
        return np.minimum(1.0, np.where(pmf <= seen * _TIE, pmf, 0.0).sum(axis=1))

    least = np.minimum(p_at(pmf, np.zeros_like(lo)), p_at(pmf, hi - lo))
    p = p_at(pmf[row], a - lo[row])
    both = (n1 > 0) & (n0 > 0)
    return np.where(both[row], p, 1.0), np.where(both, least, 1.0)[row]
