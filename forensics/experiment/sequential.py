"""The sequential tests that end an experiment, on block counts: anytime-valid, so the
answer may be read after every block and the experiment stopped as soon as it is known.

`ab` (two arms run in interleaved ABBA blocks): the unit is a pair of neighbouring blocks,
one of each arm (drift and warm-up hit both). Within a pair, given the corrupted replies
of both, the number in arm B is binomial with π(r) = r·n_B / (n_A + r·n_B) when the
relative risk is r (the conditional test of two Poisson rates; Kulldorff et al. 2011's
conditional MaxSPRT uses the same statistic). Pairs multiply: for any r, the likelihood
ratio against r is a nonnegative martingale under "the RR is r", and so is its mixture
over r (a normal prior on log r). By Ville's inequality the mixture stays below 1/α with
probability 1 − α at every block at once: {r : E(r) < 1/α} is a confidence sequence for
the RR (Robbins 1970; Howard, Ramdas, McAuliffe & Sekhon 2021), valid whenever the
experiment is stopped. `differs`: 1 is outside it (the always-valid p = 1 / the largest
E(1) seen); `equivalent`: it lies inside [1/min_effect, min_effect], or both arms' rates
lie below `max_diff` (anytime-valid upper bounds at α/2 each, a beta-binomial mixture).

Requests of one block are not independent (sessions share a server; a session that was
corrupted stays so): every count is divided by the between-block dispersion φ (the Pearson
χ² of the blocks around their arm's rate over its degrees of freedom, at least 1; 1 until
each arm has two blocks) — a quasi-binomial variance inflation. Blocks, not requests, are
the unit the interleaving protects; the inflation is estimated, so the simulations
(tests/test_experiment.py) are what show the error stays near α under block-correlated
nulls.

`check` (one arm): Wald's SPRT of the rate between `good_rate` and `bad_rate` (α = β):
bad when the log likelihood ratio reaches log((1 − α)/α), good when it reaches
log(α/(1 − α)); rates between the two are the indifference zone (either answer is allowed).
The same dispersion divides its counts.

Every function takes arrays with leading dimensions (experiments) so the simulations run
the command's own decision vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 601))  # RR values the CS is read on
PRIOR_SD = 1.0  # of log r in the mixture: effects near e^±1 are found fastest
RATE_GRID = np.linspace(0.0, 1.0, 1001)[1:-1]  # rates a one-arm bound is read on


@dataclass
class AbState:
    """The evidence after the completed pairs (each array has the experiments' shape)."""

    e_one: np.ndarray  # the mixture's E at RR = 1
    lo: np.ndarray  # the RR's confidence sequence (0: no lower bound)
    hi: np.ndarray  # inf: no upper bound
    rr: np.ndarray  # the pooled estimate (NaN: no corrupted reply yet)
    below: np.ndarray  # bool: both arms' rates bounded below max_diff


ICC_PRIOR = 0.1  # the between-block correlation assumed before the blocks tell
PRIOR_DOF = 4.0  # how many blocks' worth of evidence that assumption weighs


class Dispersion:
    """φ per experiment, kept from each arm's sums as blocks arrive: Pearson's χ² of the
    blocks around their arm's pooled rate over its degrees of freedom, shrunk towards the
    design effect of ICC_PRIOR (1 + (m − 1)·ρ for blocks of m units) with PRIOR_DOF
    pseudo-blocks; at least 1."""

    def __init__(self, shape: tuple[int, ...], arms: int) -> None:
        self.sums = np.zeros((4, arms, *shape))  # Σx, Σn, Σx²/n, blocks

    def add(self, arm: int, x: np.ndarray, n: np.ndarray) -> None:
        x, n = np.asarray(x, dtype=float), np.asarray(n, dtype=float)
        on = n > 0
        self.sums[0, arm] += x
        self.sums[1, arm] += n
        self.sums[2, arm] += np.divide(x * x, n, out=np.zeros_like(x), where=on)
        self.sums[3, arm] += on

    @property
    def phi(self) -> np.ndarray:
        sx, sn, sxx, k = self.sums
        p = np.divide(sx, sn, out=np.zeros_like(sx), where=sn > 0)
        var = p * (1 - p)
        dev = sxx - 2 * p * sx + p * p * sn  # Σ (x − n·p)² / n
        chi = np.divide(dev, var, out=np.zeros_like(dev), where=var > 0).sum(0)
        dof = np.maximum(k - 1, 0).sum(0)
        size = np.divide(sn.sum(0), k.sum(0), out=np.ones_like(chi), where=k.sum(0) > 0)
        prior = 1 + (size - 1) * ICC_PRIOR
        return np.maximum((chi + PRIOR_DOF * prior) / (dof + PRIOR_DOF), 1.0)


def pair_loglik(xa: np.ndarray, na: np.ndarray, xb: np.ndarray, nb: np.ndarray) -> np.ndarray:
    """Each pair's conditional log likelihood of every RR on the grid (last axis), before
    the dispersion divides it: x_B log π(r) + x_A log(1 − π(r))."""
    xa, na, xb, nb = (np.asarray(v, dtype=float)[..., None] for v in (xa, na, xb, nb))
    pi = GRID * nb / np.where(na + GRID * nb > 0, na + GRID * nb, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = xb * np.log(pi) + xa * np.log1p(-pi)
    return np.nan_to_num(ll, nan=0.0, neginf=-1e12)


def ab_state(
    loglik: np.ndarray, phi: np.ndarray, totals: tuple[np.ndarray, ...], alpha: float,
    max_diff: float | None = None, direction: int = 0,
) -> AbState:  # fmt: skip
    """The evidence from the completed pairs: `loglik` their summed `pair_loglik`, `phi`
    the dispersion, `totals` (corrupted A, requests A, corrupted B, requests B).
    `direction` +1 (−1): E(1) mixes only RRs above (below) 1 — a one-sided test, more
    power that way and none the other; the interval stays two-sided."""
    phi = np.asarray(phi, dtype=float)
    ll = loglik / phi[..., None]
    top = ll.max(axis=-1, keepdims=True)
    log_mix = np.log(np.exp(ll - top) @ np.exp(_LOG_PRIOR)) + top[..., 0]
    log_e = log_mix[..., None] - ll  # log E(r), every r on the grid
    inside = log_e < np.log(1 / alpha)
    lo = np.where(inside[..., 0], 0.0, GRID[np.argmax(inside, axis=-1)])
    last = inside.shape[-1] - 1 - np.argmax(inside[..., ::-1], axis=-1)
    hi = np.where(inside[..., -1], np.inf, GRID[last])
    sa, ta, sb, tb = (np.asarray(v, dtype=float) for v in totals)
    with np.errstate(divide="ignore", invalid="ignore"):
        # a zero arm is a ratio of 0 or ∞, not "n/a": only with no corrupted reply in
        # either arm (or no reply at all) is there no estimate
        rr = np.where((ta > 0) & (tb > 0) & (sa + sb > 0),
                      np.where(sa > 0, (sb / tb) / np.where(sa > 0, sa / ta, 1.0), np.inf),
                      np.nan)  # fmt: skip
    below = np.zeros(sa.shape, dtype=bool)
    if max_diff is not None:
        ua = rate_upper(sa / phi, ta / phi, alpha / 2)
        ub = rate_upper(sb / phi, tb / phi, alpha / 2)
        below = (ua <= max_diff) & (ub <= max_diff)
    log_e_one = log_e[..., _ONE]
    if direction:
        side = np.sign(np.log(GRID)) == direction
        w = np.where(side, _LOG_PRIOR, -np.inf)
        w = w - np.log(np.exp(w).sum())
        log_e_one = np.log(np.exp(ll - top) @ np.exp(w)) + top[..., 0] - ll[..., _ONE]
    return AbState(np.exp(np.minimum(log_e_one, 700)), lo, hi, rr, below)


def _log_prior() -> np.ndarray:
    w = -0.5 * (np.log(GRID) / PRIOR_SD) ** 2
    return w - np.log(np.exp(w).sum())


_LOG_PRIOR = _log_prior()
_ONE = int(np.argmin(np.abs(GRID - 1.0)))


def rate_upper(x: np.ndarray, n: np.ndarray, alpha: float) -> np.ndarray:
    """An anytime-valid upper bound of a rate from `x` of `n` (fractional counts allowed):
    the largest p whose uniform-mixture (beta-binomial) likelihood ratio stays below 1/α
    (Robbins' mixture, read on a grid of rates; one-sided)."""
    x, n = np.asarray(x, dtype=float)[..., None], np.asarray(n, dtype=float)[..., None]
    ll = x * np.log(RATE_GRID) + (n - x) * np.log1p(-RATE_GRID)
    top = ll.max(axis=-1, keepdims=True)
    log_mix = np.log(np.exp(ll - top).sum(-1, keepdims=True) / (len(RATE_GRID) + 1)) + top
    ok = (log_mix - ll < np.log(1 / alpha)) | (x / np.maximum(n, 1) >= RATE_GRID)
    last = ok.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1)
    return RATE_GRID[last]


def sprt_llr(x: np.ndarray, n: np.ndarray, good: float, bad: float, phi: np.ndarray) -> np.ndarray:
    """Wald's log likelihood ratio of `bad` over `good` for x of n, divided by φ."""
    x, n = np.asarray(x, dtype=float), np.asarray(n, dtype=float)
    llr = x * np.log(bad / good) + (n - x) * np.log((1 - bad) / (1 - good))
    return llr / np.asarray(phi, dtype=float)


def sprt_bounds(alpha: float) -> tuple[float, float]:
    """(good below, bad above): Wald's thresholds with α = β."""
    return float(np.log(alpha / (1 - alpha))), float(np.log((1 - alpha) / alpha))


def requests_needed(lo: float, hi: float, requests: int, min_effect: float) -> int | None:
    """About how many judged requests an arm the interval would need to fit inside
    [1/min_effect, min_effect] (its log width shrinks as 1/√n)."""
    if not (lo > 0 and np.isfinite(hi)) or requests <= 0:
        return None
    width, target = np.log(hi / lo), 2 * np.log(min_effect)
    return int(np.ceil(requests * (width / target) ** 2))


CONTINUE, DIFFERS, EQUIVALENT = 0, 1, 2  # ab's codes
BAD, GOOD = 1, 2  # check's (CONTINUE: undecided so far)


class AbTest:
    """Two arms watched pair by pair (arrays of `shape`: one per simulated experiment, or
    `()` for the command's one): `add_pair` returns each experiment's code, and the
    running confidence sequence (intersected over time), E and p are kept."""

    def __init__(self, shape: tuple[int, ...], alpha: float, min_effect: float,
                 max_diff: float | None = None, direction: int = 0) -> None:  # fmt: skip
        self.alpha, self.min_effect, self.max_diff = alpha, min_effect, max_diff
        self.direction = direction
        self.loglik = np.zeros((*shape, len(GRID)))
        self.lo, self.hi = np.zeros(shape), np.full(shape, np.inf)
        self.e_max = np.ones(shape)
        self.totals = [np.zeros(shape) for _ in range(4)]  # x_A, n_A, x_B, n_B
        self.dispersion = Dispersion(shape, 2)
        self.state: AbState | None = None

    def add_pair(self, xa: np.ndarray, na: np.ndarray, xb: np.ndarray,
                 nb: np.ndarray) -> np.ndarray:  # fmt: skip
        xa, na, xb, nb = (np.asarray(v, dtype=float) for v in (xa, na, xb, nb))
        self.loglik += pair_loglik(xa, na, xb, nb)
        for i, v in enumerate((xa, na, xb, nb)):
            self.totals[i] = self.totals[i] + v
        self.dispersion.add(0, xa, na)
        self.dispersion.add(1, xb, nb)
        st = ab_state(self.loglik, self.dispersion.phi, tuple(self.totals), self.alpha,
                      self.max_diff, self.direction)  # fmt: skip
        self.lo, self.hi = np.maximum(self.lo, st.lo), np.minimum(self.hi, st.hi)
        self.e_max = np.maximum(self.e_max, st.e_one)
        st.lo, st.hi = self.lo, self.hi
        self.state = st
        inside = (self.lo >= 1 / self.min_effect) & (self.hi <= self.min_effect)
        return np.where(self.e_max >= 1 / self.alpha, DIFFERS,
                        np.where(inside | st.below, EQUIVALENT, CONTINUE))  # fmt: skip

    @property
    def p(self) -> np.ndarray:
        """The always-valid p of "the rates are equal": 1 / the largest E(1) seen."""
        return np.minimum(1.0, 1.0 / self.e_max)


class CheckTest:
    """One arm watched block by block: Wald's SPRT between `good` and `bad` rates."""

    def __init__(self, shape: tuple[int, ...], alpha: float, good: float, bad: float) -> None:
        if not 0 < good < bad < 1:
            raise ValueError(f"good_rate {good:g} must be below bad_rate {bad:g}, both in (0, 1)")
        self.good, self.bad = good, bad
        self.low, self.high = sprt_bounds(alpha)
        self.x, self.n = np.zeros(shape), np.zeros(shape)
        self.dispersion = Dispersion(shape, 1)
        self.llr = np.zeros(shape)

    def add_block(self, x: np.ndarray, n: np.ndarray) -> np.ndarray:
        x, n = np.asarray(x, dtype=float), np.asarray(n, dtype=float)
        self.x, self.n = self.x + x, self.n + n
        self.dispersion.add(0, x, n)
        self.llr = sprt_llr(self.x, self.n, self.good, self.bad, self.dispersion.phi)
        return np.where(self.llr >= self.high, BAD, np.where(self.llr <= self.low, GOOD, CONTINUE))
