"""Every label `suspects`, `compare` and `correlate` print follows from its numbers: a
property test over seeded random stratified tables (empty strata, zero cells, odds ratios
of 0 and ∞ among them). Issue 51: a pooled odds ratio below 1 was labelled "holds within
load strata" beside a crude one above it."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.analyses.compare import RunRate, _pair
from forensics.analyses.correlate import _association
from forensics.analyses.stats import ALPHA, holm, two_by_two, wilson
from forensics.analyses.suspects.features import Feature, Table
from forensics.analyses.suspects.rank import (
    HOLDS,
    LESS,
    LOAD,
    MASKED,
    NOISE,
    REVERSED,
    SUSPECT,
    Suspect,
    _side,
    rank,
)

FEATURES = (
    Feature("concurrency", "numeric", "in flight", "-", load=True),
    Feature("running", "numeric", "#running-req", "-", load=True),
    Feature("abort", "event", "abort", "-", window="request"),
    Feature("retract", "event", "retract", "-", window="request"),
    Feature("host", "level", "host", "-"),
)


def _confounded(rng: np.random.Generator) -> Table:
    """Load strata with their own corruption rates (0 and 1 among them); factors whose
    exposure follows load, each with its own effect within the strata (any sign)."""
    n = int(rng.integers(20, 700))
    conc = rng.choice(rng.integers(1, 80, int(rng.integers(1, 8))), n).astype(float)
    stratum = np.searchsorted(np.unique(conc), conc)
    base = rng.choice([0.0, 0.01, 0.05, 0.2, 0.6, 1.0], stratum.max() + 1)
    cols: dict[str, np.ndarray] = {"concurrency": conc, "running": conc + rng.integers(0, 3, n)}
    risk = base[stratum].copy()
    for name in ("abort", "retract"):
        share = rng.choice([0.0, 0.05, 0.5, 0.95, 1.0], stratum.max() + 1)  # empty strata too
        exposed = rng.random(n) < share[stratum]
        cols[name] = exposed.astype(float)
        risk = np.where(exposed, np.clip(risk * rng.choice([0.0, 0.3, 1.0, 3.0, 10.0]), 0, 1),
                        risk)  # fmt: skip
    hosts = np.array(["d0", "d1"], dtype=object)
    cols["host"] = hosts[(rng.random(n) < np.where(stratum % 2 == 0, 0.8, 0.2)).astype(int)]
    corrupted = rng.random(n) < risk
    return Table(cols, corrupted, np.full(n, "r", dtype=object), {"r": {}})


def _check_suspect(s: Suspect) -> None:
    t, st = s.table, s.stratified
    crude = _side(t.odds_ratio)
    if s.load:  # stratified by itself: no p to read
        assert st is None or st.p is None, s
    if st is not None and st.verdict == HOLDS:
        assert st.p < ALPHA and _side(st.odds_ratio) == crude != 0, s
    if st is not None and st.verdict == REVERSED:
        assert crude > 0 and _side(st.odds_ratio) < 0 and st.p < ALPHA, s
    if st is not None and st.verdict == MASKED:
        assert crude < 0 and _side(st.odds_ratio) > 0 and st.p < ALPHA, s
    if s.verdict == SUSPECT:
        assert s.q < ALPHA and t.interval_agrees and crude > 0, s
        assert st is None or st.verdict not in (REVERSED, MASKED, LOAD), s
        if st is not None and st.p is not None:
            assert st.verdict == HOLDS, s
    if s.verdict == REVERSED:
        assert st is not None and st.verdict == REVERSED and s.q < ALPHA, s
    if s.verdict == MASKED:
        assert st is not None and st.verdict == MASKED and s.q < ALPHA and crude < 0, s
    if s.verdict == LESS:
        assert s.q < ALPHA and crude < 0, s
    if s.verdict == LOAD:
        assert s.q < ALPHA and st is not None and st.p is not None and st.p >= ALPHA, s
    if s.verdict == NOISE:
        assert s.q >= ALPHA, s
    d = s.as_dict()  # --json carries both ratios
    assert "odds_ratio" in d and (d["stratified"] is None or "odds_ratio" in d["stratified"])


def test_every_suspects_label_follows_from_its_numbers() -> None:
    rng = np.random.default_rng(51)
    seen: set[str] = set()
    for _ in range(300):
        table = _confounded(rng)
        for s in rank(table, FEATURES, min_support=1).tested:
            _check_suspect(s)
            seen.add(s.verdict)
            if s.stratified is not None:
                seen.add(s.stratified.verdict)
    # the draw reaches the labels the rules are about, else it proves nothing
    assert {SUSPECT, LOAD, LESS, NOISE, HOLDS} <= seen, seen
    assert REVERSED in seen or MASKED in seen, seen


@pytest.mark.parametrize("seed", range(3))
def test_every_compare_label_follows_from_its_numbers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        rates = []
        for i in range(int(rng.integers(2, 5))):
            n = int(rng.choice([0, 1, 5, 60, 900]))
            k = int(rng.binomial(n, rng.choice([0.0, 0.02, 0.3, 1.0]))) if n else 0
            lo, hi = wilson(k, n)
            rates.append(RunRate(f"r{i}", {}, n, k, k / n if n else None, lo, hi))
        tables = [(a, b, two_by_two(a.corrupted, a.requests, b.corrupted, b.requests))
                  for i, a in enumerate(rates) for b in rates[i + 1:]]  # fmt: skip
        adjusted = iter(holm([t.p_value for *_, t in tables if t.p_value is not None]))
        for a, b, t in tables:
            pair = _pair(a, b, t, next(adjusted) if t.p_value is not None else None, len(tables))
            text = pair.conclusion
            if t.p_value is None:
                assert "nothing to test" in text
            elif pair.p_adjusted < ALPHA:
                assert "a real difference" in text and "within noise" not in text
            else:
                assert "within noise" in text and "a real difference" not in text
                assert pair.p_adjusted >= t.p_value


@pytest.mark.parametrize("seed", range(3))
def test_every_correlate_label_follows_from_its_numbers(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    for _ in range(400):
        n1, n0 = (int(rng.choice([0, 1, 3, 40, 500])) for _ in range(2))
        a = int(rng.binomial(n1, rng.choice([0.0, 0.05, 0.5, 1.0]))) if n1 else 0
        c = int(rng.binomial(n0, rng.choice([0.0, 0.05, 0.5, 1.0]))) if n0 else 0
        t = two_by_two(a, n1, c, n0)
        text = _association("bad_room", "a bad room", (t, 0), "-").conclusion
        side = _side(t.odds_ratio)
        if t.p_value is None:
            assert text.startswith("cannot test")
        elif not t.interval_agrees:
            assert text.startswith("borderline")
        elif text.startswith("corruption is associated"):
            assert t.significant and side > 0
        elif text.startswith("corruption is less frequent"):
            assert t.significant and side < 0
        else:
            assert text.startswith("no evidence") and not t.significant, text


def test_a_masked_and_a_reversed_line_are_said_with_both_ratios() -> None:
    from forensics.analyses.suspects import Suspects
    from forensics.analyses.suspects.rank import Ranking, Stratified, Suspect

    masked = Suspect("abort", "an abort near it", two_by_two(3, 100, 30, 200), 0.01, 3,
                     MASKED, Stratified(2.5, 0.01, MASKED), False, None)  # fmt: skip
    flipped = Suspect("retract", "a retraction", two_by_two(30, 100, 10, 200), 0.01, 30,
                      REVERSED, Stratified(0.4, 0.02, REVERSED), False, None)  # fmt: skip
    masked.group, flipped.group = 1, 2
    r = Suspects(["r"], 0.05, "BH", 2, Ranking(300, 33, [masked, flipped], [], [], []), {}, [])
    said = "\n".join(r.sentences())
    assert "masked by load" in said and "within load strata, MH p = 0.01" in said
    assert "an abort near it (OR 0.18" in said and "2.5 within load strata" in said
    assert "a retraction (OR" in said and "0.4 within load strata" in said
    assert not r.found() or all(s.verdict == SUSPECT for s in r.suspects)
