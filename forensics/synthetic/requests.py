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

from dataclasses import dataclass, field

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


@dataclass
class Failures:
    """Failure rows (the `failures` view's columns cascades.py reads), in time order, the
    requests they came with, and the planted first failure's index (None: no cascade)."""

    kind: str
    rows: list[dict]
    requests: Requests
    root: int | None
    hosts: list[str] = field(default_factory=list)  # each request's decode host (rid r{i:05d})


FAILURE_KINDS = ("background", "cascade")
FAIL_RATE = 0.01  # a request's transfer failing on its own (×STEP in the busiest phase)
LOST = "decode-2"  # the host whose agent is lost in a cascade
ANOTHER_RANK = "Failed due to an unknown reason from another rank"  # SGLang's wording
DEAD = "Failed to get kvcache from prefill instance, it might be dead"


def generate_failures(
    kind: str, seed: int = 0, requests: int = 1800, lost: tuple[float, float] = (1 / 3, 2 / 3)
) -> Failures:
    """Background failures at a load-driven rate (a transfer failure on a decode host, half
    naming one of four prefill sessions, its prefill echo `Aborted by AbortReq.`), and
    for "cascade" a lost agent on one decode host, at a share of the requests drawn from
    `lost`: NIXL_ERR_REMOTE_DISCONNECT, then NIXL_ERR_NOT_FOUND on every later transfer
    there (to the end), some with another rank's echo, each with prefill's."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"unknown kind {kind!r}: one of {', '.join(FAILURE_KINDS)}")
    req = generate_requests("constant", seed, requests)
    rng = np.random.default_rng([seed, 7])
    busy = req.phase == PHASES.index("high")
    lo, hi = int(lost[0] * requests), int(lost[1] * requests)
    lost_at = int(rng.integers(lo, max(hi, lo + 1))) if kind == "cascade" else None
    rows: list[dict] = []
    hosts: list[str] = []
    for i, t in enumerate(req.t.tolist()):
        host = f"decode-{int(rng.integers(0, 4))}"
        hosts.append(host)
        room = int(rng.integers(0, 2**62))
        rid = f"r{i:05d}"
        if lost_at is not None and i >= lost_at and host == LOST:
            code = "NIXL_ERR_REMOTE_DISCONNECT" if i == lost_at else "NIXL_ERR_NOT_FOUND"
            rows.append(_failure(t, host, 0, rid, room, code, None))
            if i > lost_at and rng.random() < 0.5:
                rows.append(_failure(t + 2_000, host, 1, rid, room, None, ANOTHER_RANK))
        elif rng.random() < FAIL_RATE * (STEP if busy[i] else 1.0):
            rows.append(_failure(t, host, int(rng.integers(0, 4)), rid, room, None, DEAD))
            if rng.random() < 0.5:  # Mooncake names the session: chains by peer are chance
                rows[-1]["peer"] = f"10.0.4.{11 + int(rng.integers(0, 4))}:16581"
        else:
            continue
        if rng.random() < 0.8:
            rows.append(_failure(t + 500_000, "prefill-0", 0, rid, room, None,
                                 "Aborted by AbortReq."))  # fmt: skip
    if lost_at is not None and not any(r["code"] == "NIXL_ERR_REMOTE_DISCONNECT" for r in rows):
        return generate_failures(kind, seed + 1000, requests, lost)  # the lost host got none
    rows.sort(key=lambda r: (r["ts_us"], r["host"]))
    root = next((i for i, r in enumerate(rows) if r["code"] == "NIXL_ERR_REMOTE_DISCONNECT"), None)
    return Failures(kind, rows, req, root, hosts)


def _failure(t: int, host: str, tp: int, rid: str, room: int, code: str | None,
             reason: str | None) -> dict:  # fmt: skip
    return {"ts_us": int(t), "host": host, "tp": tp, "kind": "transfer", "rid": rid,
            "room": room, "peer": None, "code": code, "reason": reason}  # fmt: skip


def generate_onset_shapes(seed: int) -> Requests:
    """One onset of a shape the scan was not tuned on (the interval's coverage sweep): the
    rate from 2 % to 10–40 % for requests sent after a time 20–80 % of the way in, over
    600–3,000 requests in 2–5 load phases of random levels and lengths, and in half of
    them a load change within 5 % of the requests of the onset."""
    rng = np.random.default_rng([seed, 65])
    n = int(rng.integers(600, 3001))
    after = float(rng.choice([0.10, 0.20, 0.30, 0.40]))
    at = int(rng.uniform(0.2, 0.8) * n)
    cuts = sorted(int(c) for c in rng.uniform(0.1, 0.9, int(rng.integers(1, 5))) * n)
    if rng.random() < 0.5:  # a load change beside the onset
        cuts = sorted({*cuts, at + int(rng.integers(-n // 20, n // 20 + 1))})
    phase = np.searchsorted(np.asarray(cuts), np.arange(n), side="right")
    level = rng.choice(PHASES, size=len(cuts) + 1)
    c_lo = np.array([LOADS[p][0][0] for p in level])[phase]
    c_hi = np.array([LOADS[p][0][1] for p in level])[phase]
    concurrency = rng.integers(c_lo, c_hi, endpoint=False).astype(float)
    gap = rng.integers(GAP_US // 4, GAP_US, n)
    t = T0_US + np.cumsum(gap)
    sessions = int(rng.integers(8, 64))
    session = np.array([f"s{k % sessions:02d}" for k in range(n)], dtype=object)
    rate = np.where(np.arange(n) >= at, after, 0.02)
    y = rng.random(n) < rate
    return Requests("onset", t, y, concurrency, session, phase, int(t[at]))
