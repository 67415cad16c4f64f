"""Judged requests without a journal: the tables the onset scan and the cascade rules are
swept over (seeds 0–19 in the tests), each with its known truth.

Three load phases one after another (low, high, mid: the busiest is not the last, so a
rate that steps with the load is no onset that stays), 40 sessions interleaved over the
whole run, each request sent at its phase's concurrency. Kinds:

- "constant": one corruption rate everywhere (the null)
- "load": the rate ×3 in the busiest phase only (a null: load, not an onset)
- "onset": the rate ×3 from the middle of the second phase on (the truth: `onset_us`)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .incident import T0_US
from .planted import LOADS

KINDS = ("constant", "load", "onset")
PHASES = ("low", "high", "mid")
RATE = 0.06  # planted.NULL_RATE
STEP = 3.0
GAP_US = 200_000  # between two sends


@dataclass
class Requests:
    kind: str
    t: np.ndarray  # sent, µs
    y: np.ndarray  # corrupted
    concurrency: np.ndarray
    session: np.ndarray
    phase: np.ndarray  # index into PHASES
    onset_us: int | None  # the planted change's time (the first request after it)


def generate_requests(
    kind: str, seed: int = 0, requests: int = 1800, sessions: int = 40
) -> Requests:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    i = np.arange(requests)
    phase = np.minimum(i * len(PHASES) // requests, len(PHASES) - 1)
    lo = np.array([LOADS[p][0][0] for p in PHASES])[phase]
    hi = np.array([LOADS[p][0][1] for p in PHASES])[phase]
    concurrency = rng.integers(lo, hi, endpoint=False).astype(float)
    t = T0_US + i * GAP_US + rng.integers(0, GAP_US // 2, requests)
    session = np.array([f"s{k % sessions:02d}" for k in i], dtype=object)
    rate = np.full(requests, RATE)
    onset_us = None
    if kind == "load":
        rate[phase == PHASES.index("high")] *= STEP
    elif kind == "onset":
        at = requests // 2  # the middle of the second phase
        rate[at:] *= STEP
        onset_us = int(t[at])
    y = rng.random(requests) < rate
    return Requests(kind, t, y, concurrency, session, phase, onset_us)
