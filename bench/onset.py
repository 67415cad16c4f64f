"""The onset's 95 % interval on onsets of shapes the scan was not tuned on: coverage, the
estimate's median error and the interval's median width, for today's interval (a
confidence set by test inversion, forensics/analyses/onset.py) against the parametric
bootstrap it replaced (kept here as the baseline), measured in the same run.

    python3 bench/onset.py [--onsets 200] [--workers 2]

The onsets: forensics.synthetic.requests.generate_onset_shapes (600–3,000 requests, 2 %
rising to 10–40 % at 20–80 % of the way in, 2–5 load phases, half with a load change
beside the onset). Targets (issue 65): coverage ≥ 93 %, width at most twice the
bootstrap's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import numpy as np


def bootstrap_interval(r, got, replicates: int = 200, seed: int = 0) -> tuple[int, int]:
    """The replaced interval: τ re-estimated on replicates drawn from the model fitted at
    the estimate, 2.5–97.5 %."""
    from forensics.analyses import onset as O

    by_time = np.argsort(r.t, kind="stable")
    phase, edges = O._phases(r.concurrency, by_time)
    strata = O._codes(O.load_strata(r.concurrency) * (len(edges) + 1) + phase)
    order = by_time
    split = int(np.searchsorted(r.t[order], got.ts_us))
    before = np.zeros(len(r.y), bool)
    before[order[:split]] = True
    p = O._fitted(r.y, O._codes(strata), before)
    ys = np.random.default_rng([seed, 1]).random((replicates, len(r.y))) < p[None, :]
    curves = O._curve(ys[:, order], strata[order], len(r.y))
    times = r.t[order][np.argmax(curves, axis=1) + 1]
    lo, hi = np.quantile(times, [0.025, 0.975], method="inverted_cdf")
    return int(lo), int(hi)


def one(seed: int) -> dict:
    from forensics.analyses import onset as O
    from forensics.synthetic.requests import generate_onset_shapes

    r = generate_onset_shapes(seed)
    t0 = time.perf_counter()
    got = O.scan(r.t, r.y, r.concurrency, r.session, seed=seed, permutations=9, always=True)
    took = time.perf_counter() - t0
    lo, hi = got.ci_us
    blo, bhi = bootstrap_interval(r, got, seed=seed)
    truth = r.onset_us
    return {"covered": lo <= truth <= hi, "width_s": (hi - lo) / 1e6,
            "error_s": abs(got.ts_us - truth) / 1e6, "took_s": took,
            "boot_covered": blo <= truth <= bhi, "boot_width_s": (bhi - blo) / 1e6}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--onsets", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        rows = list(pool.map(one, range(args.onsets)))
    wall = time.perf_counter() - t0

    def med(k: str) -> float:
        return statistics.median(r[k] for r in rows)

    cov = np.mean([r["covered"] for r in rows])
    bcov = np.mean([r["boot_covered"] for r in rows])
    print(f"{args.onsets} onsets, {wall:.1f} s on {args.workers} workers")
    print(
        f"test inversion: coverage {cov:.1%}, median width {med('width_s'):.2f} s, "
        f"median error {med('error_s'):.2f} s, a scan {med('took_s'):.2f} s"
    )
    print(f"bootstrap (replaced): coverage {bcov:.1%}, median width {med('boot_width_s'):.2f} s")
    print(f"width ratio (today / bootstrap): {med('width_s') / med('boot_width_s'):.2f}")


if __name__ == "__main__":
    main()
