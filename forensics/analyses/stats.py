"""The statistics behind the conclusions: 2×2 tables, rates with intervals, in words.

Everything numeric comes from scipy.stats; this module only arranges the counts and says
what they mean, so that "22 % vs 17 %" is answered with a p-value, not by eye.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

ALPHA = 0.05  # significance level of every conclusion


@dataclass
class TwoByTwo:
    """Exposure × outcome counts with Fisher's exact test and the relative risk."""

    exposed_cases: int
    exposed_total: int
    control_cases: int
    control_total: int
    p_value: float | None
    relative_risk: float | None
    rr_low: float | None  # 95 % confidence interval of the relative risk
    rr_high: float | None
    odds_ratio: float | None

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.p_value < ALPHA

    def as_dict(self) -> dict:
        return {k: _finite(v) for k, v in asdict(self).items()}


def two_by_two(
    exposed_cases: int, exposed_total: int, control_cases: int, control_total: int
) -> TwoByTwo:
    """Fisher's exact p (two-sided) and the relative risk exposed/control with its 95 % CI.

    Without both groups there is nothing to compare: the statistics are None.
    """
    if exposed_total == 0 or control_total == 0:
        return TwoByTwo(exposed_cases, exposed_total, control_cases, control_total,
                        None, None, None, None, None)  # fmt: skip
    # scipy.stats takes 1.5 s to import here: only a test with something to test pays.
    from scipy.stats import fisher_exact
    from scipy.stats.contingency import relative_risk

    table = [
        [exposed_cases, exposed_total - exposed_cases],
        [control_cases, control_total - control_cases],
    ]
    fisher = fisher_exact(table)
    rr = relative_risk(exposed_cases, exposed_total, control_cases, control_total)
    ci = rr.confidence_interval(confidence_level=0.95)
    return TwoByTwo(
        exposed_cases, exposed_total, control_cases, control_total,
        float(fisher.pvalue), float(rr.relative_risk), float(ci.low), float(ci.high),
        float(fisher.statistic),
    )  # fmt: skip


def wilson(k: int, n: int) -> tuple[float | None, float | None]:
    """Wilson 95 % interval of a proportion k/n (None without trials)."""
    if n == 0:
        return None, None
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


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


def fmt_p(p: float | None) -> str:
    if p is None:
        return "p n/a"
    if p < 1e-6:
        return "p < 1e-6"
    return f"p = {p:.2g}" if p < 0.01 else f"p = {p:.2f}"


def fmt_num(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞"
    return f"{x:.2g}" if abs(x) < 10 else f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _finite(v: object) -> object:
    """JSON has no inf or NaN: NaN → None, ±inf → "inf"/"-inf"."""
    if isinstance(v, float):
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v
