"""What issue 53's sections add to `forensics report` at 10 k requests: the onset scan,
the pairs, the fail-open count, the first failure and the integrity checks, each timed
in-process on a fresh scope (median of `--repeat`), beside `forensics report --json` in a
fresh process.

    python3 bench/report.py [--requests 10000] [--repeat 5]

Uses bench/suspects.py's incident (built once, cached in bench/out/). The target: the
sections together at most 0.3 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import suspects as bench  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    db = bench.build(args.requests)
    from forensics.analyses.cascades import first_failure
    from forensics.analyses.failopen import fail_open
    from forensics.analyses.integrity import integrity
    from forensics.analyses.onset import onset
    from forensics.analyses.pairs import pairs
    from forensics.scope import scoped

    rows = []
    for name, fn in (("onset", onset), ("pairs", pairs), ("fail_open", fail_open),
                     ("first_failure", first_failure), ("integrity", integrity)):  # fmt: skip
        took = []
        for _ in range(args.repeat):
            with scoped(db) as s:
                t = time.perf_counter()
                fn(s)
                took.append(time.perf_counter() - t)
        rows.append((name, statistics.median(took)))
    wall, _ = bench.timed([sys.executable, "-m", "forensics", "report", "--db", str(db), "--json"],
                          args.repeat)  # fmt: skip
    print(f"\nreport's issue-53 sections, {args.requests:,} requests, median of {args.repeat}:\n")
    print("| section | s |")
    print("|---|---:|")
    for name, s in rows:
        print(f"| {name} | {s:.3f} |")
    total = sum(s for _, s in rows)
    print(f"| together | {total:.3f} |")
    print(f"| forensics report --json (fresh process, all sections) | {wall:.2f} |")
    verdict = "meets" if total <= 0.3 else "misses"
    print(f"\nthe sections add {total:.2f} s: {verdict} the 0.3 s target")


if __name__ == "__main__":
    main()
