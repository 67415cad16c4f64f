"""The bundle's scrub on hostile runs (issue 66): 64 KiB lines of `-`, `://`, `--a`, `=`,
`:`, `token_`, `secret`, and an 8 MB page of ordinary log lines, through RE2 (google-re2,
what `forensics.scrubbing` runs) against Python's `re` running the same patterns (their
possessive runs kept, the best Python's engine can do with them), in one run.

Run: python3 bench/scrub.py
"""

from __future__ import annotations

import re
import time

from forensics.scrubbing import SECRETS, scrub

RUNS = ["-", "://", "--a", "=", ":", "token_", "secret", "secret_"]
PAGE = "".join(
    f"[2026-05-28 20:27:{i % 60:02d} TP0] Decode batch. #running-req: {i}, token usage: 0.41, "
    f"#queue-req: 0, url=http://router:8000/v1 rid=3feed15121284a76{i:08d}\n"
    for i in range(70_000)
)


def _python_re(text: str, budget: float) -> float | None:
    """Seconds Python's re takes, or None past `budget` (its rules then stop)."""
    subs = [(re.compile(p), r) for p, r in SECRETS]
    start = time.perf_counter()
    for rx, rep in subs:
        text = rx.sub(rep, text)
        if time.perf_counter() - start > budget:
            return None
    return time.perf_counter() - start


def _timed(text: str) -> float:
    start = time.perf_counter()
    scrub(text)
    return time.perf_counter() - start


def main() -> None:
    print(f"{'input':<12} {'RE2 s':>8} {'Python re s':>12}")
    for run in RUNS:
        line = run * (65536 // len(run))
        old = _python_re(line, 30.0)
        print(f"{run:<12} {_timed(line):>8.4f} {'> 30' if old is None else f'{old:.3f}':>12}")
    old = _python_re(PAGE, 60.0)
    print(f"{'8 MB page':<12} {_timed(PAGE):>8.4f} {'> 60' if old is None else f'{old:.3f}':>12}")


if __name__ == "__main__":
    main()
