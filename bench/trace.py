"""`forensics trace` at its event budget: seconds and peak RSS of the command, against
`forensics report` on the same database in the same run.

    python3 bench/trace.py [--rows 2000000] [--max-events 500000]

The database is bench/dashboard.py's (filled in SQL, then upgraded to shards): `rows`
canary records over 4 layers (a quarter with unexpected writes), a step record each
step, rooms, harness results, decode batch lines. At 2 M rows the incident holds about
1.1 M events, so the budget cuts: page writes are aggregated per step, steps left out.
Targets (issue 24): ≤ 10 s and ≤ 1 GB at the default budget.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import dashboard  # noqa: E402
from run import timed  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--max-events", type=int, default=500_000)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forensics-trace-") as tmp:
        db = Path(tmp) / "t.duckdb"
        dashboard.fill(db, args.rows)
        base = [sys.executable, "-m", "forensics"]
        rows = [("forensics report (baseline)", timed([*base, "report", "--db", str(db)]))]
        for fmt in ("proto", "json"):
            out = Path(tmp) / f"t.{fmt}"
            cmd = [*base, "trace", "--db", str(db), "--out", str(out), "--format", fmt,
                   "--max-events", str(args.max_events)]  # fmt: skip
            rows.append((f"forensics trace --format {fmt}", timed(cmd)))
            rows[-1] += (out.stat().st_size,)
        print(f"canary rows {args.rows:,}, budget {args.max_events:,} events\n")
        print("| command | s | × report | peak RSS MB | file MB |")
        print("|---|---:|---:|---:|---:|")
        report = rows[0][1][0]
        for name, (w, rss, _), *size in rows:
            mb = f"{size[0] / 2**20:,.0f}" if size else "-"
            print(f"| {name} | {w:.2f} | {w / report:.1f} | {rss:,} | {mb} |")


if __name__ == "__main__":
    main()
