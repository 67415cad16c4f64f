"""The suspects benchmark: `forensics suspects` on 10 k requests and about 100 predicates,
start-up included, as a user runs it — against baselines measured in the same run.

    python3 bench/suspects.py [--requests 10000] [--repeat 5] [--noise 1400000 --templates 500]

Builds (once, cached in bench/out/: delete it after a change to what ingest stores) a
stock incident of four tagged runs with an abort planted as the cause
(forensics/synthetic/planted.py: four decode hosts, eight DP ranks) and `noise` more
lines of `templates` templates no pattern names on the decode hosts (every one a
candidate near each transfer: issue 33's 1.5 M entries and 500 templates),
ingests it, then times in fresh processes:
- `forensics suspects --json` and `forensics suspects` (the table): the lines near each
  transfer read from the rows ingest stored
- the same with every run named: those lines computed as it reads (the baseline)
- `forensics correlate` (the older two-row answer) and `forensics --help` (start-up alone)
- `python -c "import scipy.stats"`: what the statistics would cost to import alone
Prints a Markdown table of medians; the issue's target is `suspects` ≤ 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def noise_lines(path: Path, n: int, templates: int, start_us: int, span_us: int, seed: int) -> Path:
    """`n` lines of `templates` shapes on decode-0..3, spread over the span."""
    import datetime as dt
    import random

    rng = random.Random(seed)
    with path.open("w") as f:
        for i in range(n):
            ts = start_us + i * span_us // max(n, 1)
            t = dt.datetime.fromtimestamp(ts / 1e6, dt.UTC)
            k = rng.randrange(templates)
            f.write(f"{t:%Y-%m-%dT%H:%M:%S.%f}+0000 decode-{rng.randrange(4)} python3[3001]: "
                    f"worker{'ABCDEFGHIJ'[k % 10]}{'KLMNOPQRST'[k // 10 % 10]}"
                    f"{'UVWXYZabcd'[k // 100 % 10]} step {rng.randrange(10**6)} took "
                    f"{rng.random():.3f} ms\n")  # fmt: skip
    return path


RUNS = ("base", "overlap-off", "base-2", "overlap-off-2")


def build(requests: int, noise: int = 0, templates: int = 500) -> Path:
    import forensics
    from forensics.synthetic.incident import T0_US
    from forensics.synthetic.planted import generate_planted, write_planted

    out = HERE / "out" / f"suspects-{requests}-{noise}-{templates}"
    db = out / "db.duckdb"
    if db.exists():
        return db
    out.mkdir(parents=True, exist_ok=True)
    for i, run in enumerate(RUNS):
        inc = generate_planted("abort", seed=i, requests=requests // len(RUNS), sessions=100,
                               decode_hosts=4, dp_ranks=8)  # fmt: skip
        files = write_planted(inc, out / run)
        if noise:
            span = max(r["end"] for r in inc.results) * 1e6 - T0_US
            files.append(noise_lines(out / run / "noise.log", noise // len(RUNS), templates,
                                     T0_US, int(span), i))  # fmt: skip
        tags = {"overlap": "off" if "off" in run else "on", "build": f"b{i % 2}", "driver": f"d{i}"}
        forensics.ingest([str(f) for f in files], db, run=run, tags=tags)
    return db


# As installed code runs: with its compiled bytecode (this machine sets
# PYTHONDONTWRITEBYTECODE, which would compile every module in every process). One
# unmeasured run first writes the bytecode and warms the file cache.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str], repeat: int) -> tuple[float, str]:
    """Median wall seconds of `repeat` fresh processes (after one unmeasured), and the
    last one's stdout."""
    subprocess.run(cmd, capture_output=True, check=True, env=ENV)
    walls = []
    out = ""
    for _ in range(repeat):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, check=True, env=ENV)
        walls.append(time.perf_counter() - t)
        out = proc.stdout.decode()
    return statistics.median(walls), out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--noise", type=int, default=0)
    ap.add_argument("--templates", type=int, default=500)
    args = ap.parse_args(argv)
    db = build(args.requests, args.noise, args.templates)
    fx = [sys.executable, "-m", "forensics"]
    wall, doc = timed([*fx, "suspects", "--db", str(db), "--json"], args.repeat)
    got = json.loads(doc)
    predicates = got["tested"] + len(got["screened_out"])
    rows = [
        (f"forensics suspects --json ({got['requests']:,} requests, {predicates} predicates, "
         f"{got['tested']} tested)", wall),
        ("forensics suspects (terminal table)",
         timed([*fx, "suspects", "--db", str(db)], args.repeat)[0]),
        ("forensics suspects --json, every run named (lines near the transfer computed as "
         "it reads, not read from ingest's rows)",
         timed([*fx, "suspects", "--db", str(db), "--json",
                *[a for r in RUNS for a in ("--run", r)]], args.repeat)[0]),
        ("forensics correlate", timed([*fx, "correlate", "--db", str(db)], args.repeat)[0]),
        ("forensics --help (start-up alone)", timed([*fx, "--help"], args.repeat)[0]),
        ('python -c "import scipy.stats" (baseline)',
         timed([sys.executable, "-c", "import scipy.stats"], args.repeat)[0]),
    ]  # fmt: skip
    print(f"\nsuspects (bench/suspects.py, median of {args.repeat} fresh processes):\n")
    print("| command | s | × start-up |")
    print("|---|---:|---:|")
    start = rows[4][1]
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {s / start:.2f} |")
    verdict = "meets" if wall <= 1.0 else "misses"
    print(f"\nsuspects answers in {wall:.2f} s: {verdict} the 1 s target; its own work beyond "
          f"start-up is {wall - start:.2f} s; importing scipy.stats alone takes "
          f"{rows[5][1]:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
