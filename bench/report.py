"""What issue 53's and 65's sections add to `forensics report` at 10 k requests: the onset
scan (its interval by test inversion since issue 65), the pairs, the fail-open count, the
first failure, the integrity checks and the verdict (over the sections, computed first
and not timed), each timed in-process on a fresh scope (median of `--repeat`), beside
`forensics report --json` in a fresh process.

    python3 bench/report.py [--requests 10000] [--repeat 5]

Uses bench/suspects.py's incident (built once, cached in bench/out/). The targets: issue
53's sections together at most 0.3 s; issue 65's at most 0.3 s more than issue 53's
measured the same day (run this script at both commits).
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
    if (took := _verdict(db, args.repeat)) is not None:
        rows.append(("verdict", took))
    wall, _ = bench.timed([sys.executable, "-m", "forensics", "report", "--db", str(db), "--json"],
                          args.repeat)  # fmt: skip
    print(f"\nreport's sections, {args.requests:,} requests, median of {args.repeat}:\n")
    print("| section | s |")
    print("|---|---:|")
    for name, s in rows:
        print(f"| {name} | {s:.3f} |")
    total = sum(s for _, s in rows)
    print(f"| together | {total:.3f} |")
    print(f"| forensics report --json (fresh process, all sections) | {wall:.2f} |")
    print(f"\nthe sections add {total:.2f} s")


def _verdict(db, repeat: int) -> float | None:
    """The verdict's own time over sections already computed (None: before issue 65)."""
    try:
        from forensics.analyses.verdict import decide
    except ImportError:
        return None
    from forensics.analyses.cascades import first_failure
    from forensics.analyses.correlate import correlate
    from forensics.analyses.onset import onset
    from forensics.analyses.suspects import suspects
    from forensics.scope import scoped

    took = []
    for _ in range(repeat):
        with scoped(db) as s:
            got = (first_failure(s), onset(s), suspects(s), correlate(s))
            t = time.perf_counter()
            decide(s, *got)
            took.append(time.perf_counter() - t)
    return statistics.median(took)


if __name__ == "__main__":
    main()
