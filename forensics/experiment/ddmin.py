"""Delta debugging over a configuration's flags (Zeller & Hildebrandt 2002, ddmin): the
smallest subset of a failing set that still fails, each test a `check` of the server
with those flags. A test answers "bad" (it fails), "good", or "undecided" — ddmin's
unresolved outcome, treated as not failing. Tests are remembered by subset, so none is
run twice; the budget (`max_tests`) bounds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

BAD, GOOD, UNDECIDED = "bad", "good", "undecided"


class OutOfTests(Exception):
    pass


@dataclass
class Minimized:
    subset: list[str] | None  # None: not found (the full set does not fail, budget, …)
    one_minimal: bool  # re-confirmed: it fails and each one-smaller subset passes
    why: str  # how it ended, in words
    tests: list[tuple[list[str], str]] = field(default_factory=list)  # every test run


def ddmin(flags: Sequence[str], test: Callable[[list[str]], str], max_tests: int) -> Minimized:
    """The 1-minimal failing subset of `flags` (in their order), checking first that the
    full set fails and the empty set passes, and re-confirming the answer."""
    seen: dict[frozenset[str], str] = {}
    out = Minimized(None, False, "")
    order = {f: i for i, f in enumerate(flags)}

    def run(subset: list[str]) -> str:
        key = frozenset(subset)
        if key not in seen:
            if len(out.tests) >= max_tests:
                raise OutOfTests
            seen[key] = test(sorted(subset, key=order.__getitem__))
            out.tests.append((sorted(subset, key=order.__getitem__), seen[key]))
        return seen[key]

    try:
        full = run(list(flags))
        if full != BAD:
            out.why = f"the full set of flags is {full}, not bad: nothing to minimise"
            return out
        empty = run([])
        if empty != GOOD:
            out.why = f"the server without any of the flags is {empty}, not good"
            return out
        c = _shrink(list(flags), run)
        out.subset = c
        out.one_minimal = run(c) == BAD and all(
            run([f for f in c if f != g]) == GOOD for g in c
        )  # fmt: skip
        out.why = "1-minimal" if out.one_minimal else (
            "a smaller subset was undecided: this one is minimal among those decided")  # fmt: skip
    except OutOfTests:
        out.why = f"out of tests ({max_tests}) before the answer was confirmed"
    return out


def _shrink(c: list[str], run: Callable[[list[str]], str]) -> list[str]:
    n = 2
    while len(c) >= 2:
        parts = _split(c, n)
        smaller = next((p for p in parts if run(p) == BAD), None)
        if smaller is not None:
            c, n = smaller, 2
            continue
        rest = next((r for p in parts if run(r := [f for f in c if f not in p]) == BAD), None)
        if rest is not None:
            c, n = rest, max(n - 1, 2)
            continue
        if n >= len(c):
            break
        n = min(len(c), 2 * n)
    return c


def _split(c: list[str], n: int) -> list[list[str]]:
    k, m = divmod(len(c), n)
    out, at = [], 0
    for i in range(n):
        size = k + (1 if i < m else 0)
        out.append(c[at : at + size])
        at += size
    return [p for p in out if p]
