"""A folder of many inputs: the ingest's process-tree memory, and `forensics bundle`
against the sum of its members made one command at a time, in the same run.

    python3 bench/bundle.py [--lines 1200000] [--inputs 23] [--workers N]

One mixed journal (bench/generate.py: written by systemd-journal-remote, rendered by
journalctl as short-iso-precise) cut into `inputs` files of consecutive lines: a folder
of that many sources. The ingest's memory is the summed RSS of its process and every
descendant (its reading workers), sampled every 20 ms; a single peak of one process
(GNU time) would miss the workers. Targets (issue 31): the tree ≤ 1.5 GB at the default
workers; the bundle ≤ 1.2 × (report + suspects + dashboard + trace + the views' export).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from generate import build  # noqa: E402

VIEWS = ("rooms", "requests", "skew", "canary_writes", "result_links", "request_evidence",
         "request_features")  # fmt: skip


def _tree_rss(pid: int) -> int:
    """Summed RSS (bytes) of `pid` and its descendants."""
    total, todo = 0, [pid]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * page
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(k) for k in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def run_tree(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and the process tree's peak summed RSS (MB) of one command."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            done.wait(0.02)

    th = threading.Thread(target=sample)
    th.start()
    _, err = proc.communicate()
    done.set()
    th.join()
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed: {' '.join(cmd)}\n{err.decode()[-2000:]}")
    return wall, peak >> 20


def scan_rows(db: Path, n: int) -> str:
    """One source's entries against all of them (median of 5, one connection): the
    filter on `source_id` (a shard's own folder) prunes files before they are read."""
    import statistics

    import forensics

    con = forensics.connect_read_only(db)
    try:

        def med(sql: str) -> float:
            times = []
            for _ in range(5):
                t = time.perf_counter()
                con.execute(sql).fetchall()
                times.append(time.perf_counter() - t)
            return statistics.median(times)

        every = med("SELECT sum(strlen(message)) FROM entries")
        one = med("SELECT sum(strlen(message)) FROM entries WHERE source_id = 2")
    finally:
        con.close()
    return (
        f"scan of one source's messages {one * 1e3:.0f} ms against all {n} sources' "
        f"{every * 1e3:.0f} ms ({one / every:.3f} of it; 1/{n} = {1 / n:.3f})"
    )


def split(src: Path, n: int, out: Path) -> list[Path]:
    lines = src.read_bytes().splitlines(keepends=True)
    out.mkdir()
    size = -(-len(lines) // n)
    files = []
    for i in range(n):
        f = out / f"part-{i:02d}.log"
        f.write_bytes(b"".join(lines[i * size : (i + 1) * size]))
        files.append(f)
    return files


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_200_000)
    ap.add_argument("--inputs", type=int, default=23)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args(argv)
    fx = [sys.executable, "-m", "forensics"]
    with tempfile.TemporaryDirectory(prefix="forensics-bundle-") as tmp:
        t = Path(tmp)
        journal = build(t / "gen", args.lines, "mixed", json=False)["short-iso-precise"]
        files = split(journal, args.inputs, t / "inputs")
        mb = sum(f.stat().st_size for f in files) >> 20
        db = t / "inc.duckdb"
        workers = ["--workers", str(args.workers)] if args.workers else []
        wall, peak = run_tree([*fx, "ingest", str(t / "inputs"), "--db", str(db), *workers])
        print(f"ingest of {args.inputs} inputs ({mb:,} MB): {wall:.1f} s, "
              f"process tree peak {peak:,} MB")  # fmt: skip
        print(scan_rows(db, args.inputs))
        rows = []
        for name, cmd in (
            ("report", ["report"]),
            ("suspects", ["suspects"]),
            ("dashboard", ["dashboard", "--out", str(t / "d.html")]),
            ("trace", ["trace", "--out", str(t / "t.pftrace")]),
            *(
                (f"query {v}", ["query", v, "--format", "parquet", "--out", str(t / f"{v}.pq")])
                for v in VIEWS
            ),
        ):
            rows.append((name, *run_tree([*fx, *cmd, "--db", str(db)])))
        parts = sum(w for _, w, _ in rows)
        b_wall, b_peak = run_tree([*fx, "bundle", "--db", str(db), "--out", str(t / "b.tar.zst")])
        for name, w, p in rows:
            print(f"  {name:<24} {w:6.1f} s  {p:6,} MB")
        print(f"members one by one: {parts:.1f} s; bundle {b_wall:.1f} s, {b_peak:,} MB = "
              f"{b_wall / parts:.2f}× the sum")  # fmt: skip


if __name__ == "__main__":
    main()
