"""Did a configuration change move the corruption rate, or is the difference noise?

The rate per run from the harness results, with Wilson 95 % intervals; for each pair of
runs Fisher's exact p (Holm-adjusted when there are several pairs), and, where the
difference is not significant, how many requests per run would show one of that size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import combinations

from ..scope import Db, Runs, scoped
from ..statuses import UNJUDGED_SQL
from .stats import ALPHA, TwoByTwo, fmt_p, fmt_pct, holm, requests_needed, two_by_two, wilson


@dataclass
class RunRate:
    run: str
    tags: dict[str, str]
    requests: int  # judged: with a reply (the rate's denominator)
    corrupted: int
    rate: float | None
    low: float | None  # Wilson 95 %
    high: float | None
    failed: int = 0  # unjudged (no reply: http_error, timeout; or uncompared): not in the rate

    def describe(self) -> str:
        return (
            f"{self.run} {fmt_pct(self.rate)} (95 % CI {fmt_pct(self.low)}–{fmt_pct(self.high)},"
            f" {self.corrupted}/{self.requests})"
        )


@dataclass
class PairTest:
    a: str
    b: str
    table: TwoByTwo  # exposure = being run a
    p_adjusted: float | None  # Holm over every pair compared
    needed: int | None  # requests per run to detect this difference (not significant only)
    conclusion: str

    @property
    def significant(self) -> bool:
        return self.p_adjusted is not None and self.p_adjusted < ALPHA

    def as_dict(self) -> dict:
        return {
            "a": self.a, "b": self.b, **self.table.as_dict(), "p_adjusted": self.p_adjusted,
            "significant": self.significant, "requests_needed": self.needed,
            "conclusion": self.conclusion,
        }  # fmt: skip


@dataclass
class Comparison:
    rates: list[RunRate]
    pairs: list[PairTest]
    without_results: list[str]  # runs with no harness results: nothing to compare

    def as_dict(self) -> dict:
        return {
            "rates": [asdict(r) for r in self.rates],
            "pairs": [p.as_dict() for p in self.pairs],
            "runs_without_results": self.without_results,
        }

    def sentences(self) -> list[str]:
        out = [p.conclusion for p in self.pairs]
        blocks = sorted({r.tags["experiment"] for r in self.rates if r.tags.get("experiment")})
        if blocks:  # a sequential experiment's blocks: its stopping rule voids a fixed p
            out.append(f"these runs are blocks of the sequential experiment "
                       f"{', '.join(blocks)}: it stopped when its own test decided, so the "
                       "fixed-sample p above does not hold — read the experiment's decision "
                       "(its `decision` tag, and its --json)")  # fmt: skip
        return out

    def tag_split(self) -> tuple[dict[str, str], list[dict[str, str]]]:
        """(tags every compared run shares, each run's other tags): what differs between
        the runs is what the comparison is about."""
        if len(self.rates) < 2:
            return {}, [dict(r.tags) for r in self.rates]
        first = self.rates[0].tags
        shared = {k: v for k, v in first.items() if all(r.tags.get(k) == v for r in self.rates)}
        return shared, [{k: v for k, v in r.tags.items() if k not in shared} for r in self.rates]


def compare(db: Db = None, runs: Runs = None) -> Comparison:
    """Corruption rate per run and a test for each pair (all runs when `runs` is None)."""
    with scoped(db, runs) as s:
        con, known, chosen = s.con, s.tags, s.runs
        failed = UNJUDGED_SQL
        counts = {
            r: (n, k, f)
            for r, n, k, f in con.execute(
                f"""SELECT run, count(*) FILTER (WHERE NOT {failed}),
                           count(*) FILTER (WHERE corrupted AND NOT {failed}),
                           count(*) FILTER (WHERE {failed})
                    FROM results GROUP BY run"""
            ).fetchall()
        }
        rates = []
        for r in chosen:
            if r not in counts:
                continue
            n, k, f = counts[r]
            low, high = wilson(k, n)
            rates.append(RunRate(r, known[r], n, k, k / n if n else None, low, high, f))
        tables = [(a, b, two_by_two(a.corrupted, a.requests, b.corrupted, b.requests))
                  for a, b in combinations(rates, 2)]  # fmt: skip
        adjusted = holm([t.p_value for _, _, t in tables if t.p_value is not None])
        pairs = []
        it = iter(adjusted)
        for a, b, t in tables:
            p_adj = next(it) if t.p_value is not None else None
            pairs.append(_pair(a, b, t, p_adj, len(tables)))
        without = [r for r in chosen if r not in counts]
        return Comparison(rates, pairs, without)


def _pair(a: RunRate, b: RunRate, t: TwoByTwo, p_adj: float | None, m: int) -> PairTest:
    head = f"{a.describe()} vs {b.describe()}"
    if p_adj is None:
        return PairTest(a.run, b.run, t, None, None, f"{head}: nothing to test")
    how = f"Fisher {fmt_p(t.p_value)}" + (
        f", Holm-adjusted over {m} pairs {fmt_p(p_adj)}" if m > 1 else ""
    )
    if p_adj < ALPHA:
        text = f"{head}: {how} — a real difference, not noise"
        return PairTest(a.run, b.run, t, p_adj, None, text)
    needed = requests_needed(a.rate or 0.0, b.rate or 0.0)
    more = (
        f"; telling {fmt_pct(a.rate)} from {fmt_pct(b.rate)} apart would take about "
        f"{needed:,} requests per run"
        if needed
        else ""
    )
    text = f"{head}: {how} — within noise, no evidence of a difference{more}"
    return PairTest(a.run, b.run, t, p_adj, needed, text)
