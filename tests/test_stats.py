"""The statistics are built from numpy and the standard library (scipy.stats costs more
to import than a whole answer may take): each is checked here against scipy.stats and
statsmodels, on random tables and on the edges (zeros, whole rows, tiny tables)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from scipy.stats import binomtest, fisher_exact, norm
from scipy.stats.contingency import odds_ratio, relative_risk
from statsmodels.stats.contingency_tables import StratifiedTable
from statsmodels.stats.multitest import multipletests

from forensics.analyses.stats import (
    ALPHA,
    POWER,
    Hypergeom,
    fdr,
    holm,
    mantel_haenszel,
    requests_needed,
    two_by_two,
    wilson,
)


def _tables(seed: int, n: int) -> list[tuple[int, int, int, int]]:
    """(a, n1, c, n0): small tables with every edge, and large unbalanced ones."""
    rng = random.Random(seed)
    out = [(0, 5, 0, 5), (5, 5, 0, 5), (0, 5, 5, 5), (5, 5, 5, 5), (1, 1, 0, 1), (3, 7, 3, 7)]
    for i in range(n):
        if i % 3 == 0:
            n1, n0 = rng.randint(1, 12), rng.randint(1, 12)
            out.append((rng.randint(0, n1), n1, rng.randint(0, n0), n0))
        else:
            n1, n0 = rng.randint(1, 400), rng.randint(1, 4000)
            a = rng.randint(0, min(n1, rng.choice([2, 10, n1])))
            c = rng.randint(0, min(n0, rng.choice([3, 40, n0])))
            out.append((a, n1, c, n0))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_fisher_and_the_conditional_odds_ratio_equal_scipy(seed: int) -> None:
    for a, n1, c, n0 in _tables(seed, 300):
        t = two_by_two(a, n1, c, n0)
        table = [[a, n1 - a], [c, n0 - c]]
        assert t.p_value == pytest.approx(fisher_exact(table).pvalue, rel=1e-9), table
        if a + c in (0, n1 + n0):  # one outcome only: no odds ratio to estimate
            assert t.odds_ratio is None
            continue
        ref = odds_ratio(table, kind="conditional")
        ci = ref.confidence_interval(0.95)
        for mine, theirs in ((t.odds_ratio, ref.statistic), (t.or_low, ci.low),
                             (t.or_high, ci.high)):  # fmt: skip
            if theirs in (0, math.inf):
                assert mine == theirs, table
            else:
                assert mine == pytest.approx(theirs, rel=1e-7), table


def test_relative_risk_and_its_katz_interval_equal_scipy() -> None:
    for a, n1, c, n0 in _tables(3, 200):
        t = two_by_two(a, n1, c, n0)
        ref = relative_risk(a, n1, c, n0)
        ci = ref.confidence_interval(0.95)
        for mine, theirs in ((t.relative_risk, ref.relative_risk), (t.rr_low, ci.low),
                             (t.rr_high, ci.high)):  # fmt: skip
            if math.isnan(theirs):  # undefined: None here (JSON null)
                assert mine is None
            else:
                assert mine == pytest.approx(theirs, rel=1e-12)


def test_the_smallest_attainable_p_is_the_least_fisher_p_of_the_margins() -> None:
    """Tarone's screen reads the margins only: the least p over every table they allow."""
    for n1, n0, k in ((5, 40, 3), (30, 30, 10), (1, 200, 7), (12, 9, 21), (300, 2000, 40)):
        h = Hypergeom(n1, n0, k)
        every = [fisher_exact([[a, n1 - a], [k - a, n0 - k + a]]).pvalue
                 for a in range(max(0, k - n0), min(n1, k) + 1)]  # fmt: skip
        assert h.least_p() == pytest.approx(min(every), rel=1e-9)


def test_wilson_equals_scipy() -> None:
    for k, n in ((0, 10), (3, 10), (10, 10), (17, 400), (1, 1), (250, 1000)):
        ref = binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert wilson(k, n) == pytest.approx((ref.low, ref.high), rel=1e-12, abs=1e-15)
    assert wilson(0, 0) == (None, None)


def test_fdr_and_holm_equal_statsmodels() -> None:
    rng = np.random.default_rng(5)
    for m in (1, 2, 7, 100):
        p = list(np.concatenate([rng.uniform(0, 1, m - m // 3), rng.uniform(0, 0.01, m // 3)]))
        for dependent, method in ((False, "fdr_bh"), (True, "fdr_by")):
            assert fdr(p, dependent) == pytest.approx(list(multipletests(p, method=method)[1]))
        assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))
    assert fdr([]) == []


def test_mantel_haenszel_equals_statsmodels_stratified_table() -> None:
    rng = np.random.default_rng(9)
    for _ in range(50):
        strata = [tuple(int(v) for v in rng.integers(0, 30, 4)) for _ in range(rng.integers(2, 6))]
        strata = [s for s in strata if sum(s) >= 2]
        # statsmodels takes 2 × 2 × K: table[:, :, k] = [[a, b], [c, d]]
        tables = np.array([[[a, b], [c, d]] for a, b, c, d in strata], dtype=float).transpose(
            1, 2, 0
        )
        ref = StratifiedTable(tables)
        pooled, p = mantel_haenszel(strata)
        var = sum((a + b) * (c + d) * (a + c) * (b + d) / ((a + b + c + d) ** 2 * (a + b + c + d - 1))
                  for a, b, c, d in strata)  # fmt: skip
        if var == 0:
            assert p is None
            continue
        assert p == pytest.approx(ref.test_null_odds(correction=False).pvalue, rel=1e-9)
        if math.isfinite(ref.oddsratio_pooled) and pooled is not None:
            assert pooled == pytest.approx(ref.oddsratio_pooled, rel=1e-12)


def test_requests_needed_is_the_two_proportion_normal_approximation() -> None:
    za, zb = norm.ppf(1 - ALPHA / 2), norm.ppf(POWER)
    for p1, p2 in ((0.22, 0.17), (0.05, 0.01), (0.5, 0.4)):
        pbar = (p1 + p2) / 2
        num = za * math.sqrt(2 * pbar * (1 - pbar)) + zb * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
        assert requests_needed(p1, p2) == math.ceil(num**2 / (p1 - p2) ** 2)
    assert requests_needed(0.2, 0.2) is None


def test_the_interval_and_the_conclusion_agree_or_say_they_do_not() -> None:
    """Significant and an exact interval that excludes 1 go together; where the two
    inversions part (at the edge), `interval_agrees` says so."""
    parted = []
    for a, n1, c, n0 in _tables(4, 400):
        t = two_by_two(a, n1, c, n0)
        if t.p_value is None or t.or_low is None:
            continue
        excludes = t.or_low > 1 or t.or_high < 1
        assert t.interval_agrees == (excludes == t.significant)
        if not t.interval_agrees:
            parted.append(t.p_value)
    # they part only at the edge: p within a factor of two of the level
    assert parted and all(ALPHA / 2 <= p <= 1.1 * ALPHA for p in parted)


def test_nothing_to_compare_gives_no_statistics() -> None:
    t = two_by_two(0, 0, 3, 10)
    assert t.p_value is None and not t.significant
    assert two_by_two(5, 10, 0, 30).as_dict()["relative_risk"] is None  # ∞: JSON null


def test_fisher_many_is_fisher_table_by_table() -> None:
    from forensics.analyses.stats import Hypergeom, fisher_many

    rng = np.random.default_rng(7)
    rows = []
    for _ in range(200):
        n1, n0 = int(rng.integers(0, 300)), int(rng.integers(0, 3000))
        k = int(rng.integers(0, max(1, min(400, n1 + n0))))
        a = int(rng.integers(max(0, k - n0), min(n1, k) + 1))
        rows.append((a, n1, k - a, n0))
    a, n1, c, n0 = (np.array(col) for col in zip(*rows, strict=True))
    p, least = fisher_many(a, n1, c, n0, cells=4096)  # chunks of a few tables
    for i, (ai, n1i, ci, n0i) in enumerate(rows):
        if n1i and n0i:
            h = Hypergeom(n1i, n0i, ai + ci)
            assert abs(p[i] - h.fisher(ai)) < 1e-9 and abs(least[i] - h.least_p()) < 1e-9
        else:
            assert p[i] == 1.0


def test_mantel_haenszel_arrays_is_the_list_form() -> None:
    from forensics.analyses.stats import mantel_haenszel, mantel_haenszel_arrays

    t = np.random.default_rng(3).integers(0, 15, (40, 4))
    t[0] = [1, 0, 0, 0]  # a stratum of one: dropped by both
    got = mantel_haenszel_arrays(*t.T)
    want = mantel_haenszel([tuple(int(v) for v in r) for r in t])
    assert all(abs(x - y) < 1e-12 for x, y in zip(got, want, strict=True))
