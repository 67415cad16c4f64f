"""How ingest scales with cores: the benchmark's journals on every core of a larger machine
against a few of them (taskset) and lnav, all in one run.

    python3 bench/cores.py --build                # both journals, generated side by side
    python3 bench/cores.py [--shape mixed|decode] [--cores 2,4,8]

The journals are the ones bench/run.py uses (same generator, same seed): their sha256 is
printed so that a run elsewhere can be checked to have read the same bytes. On the lent
GPU machine (16 cores, bench/gpu/carry.sh and unpack.sh bring what it lacks) this gives
the README's row for 8+ cores; on 2 cores it gives the 1- and 2-core rows.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402
from run import ENTRIES_ALONE, count_lines, entries_alone_cmd, ingest_cmd, run_lnav, timed  # noqa: E402

LINES = {"mixed": 1_500_000, "decode": 5_000_000}


def journal(shape: str) -> Path:
    return generate.build(HERE / "out", LINES[shape], shape, json=False)["short-iso-precise"]


def sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def pinned(cmd: list[str], cores: int) -> list[str]:
    """The command on the first `cores` CPUs this process may use."""
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    return ["taskset", "-c", ",".join(map(str, cpus)), *cmd]


def pinning_works() -> bool:
    """Whether taskset restricts a child (some sandboxes accept the call and ignore it)."""
    if shutil.which("taskset") is None:
        return False
    probe = [sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"]
    out = subprocess.run(pinned(probe, 1), capture_output=True, text=True).stdout.strip()
    return out == "1"


def bench(shape: str, cores: list[int]) -> None:
    log = journal(shape)
    mb = log.stat().st_size / 2**20
    n_lines = count_lines(log)
    have = len(os.sched_getaffinity(0))
    print(f"\n{shape} journal: {log.name}: {n_lines:,} lines, {mb:,.0f} MB, "
          f"sha256 {sha256(log)}; {have} cores, {os.cpu_count()} CPUs\n")  # fmt: skip
    rows: list[tuple[str, float, int]] = []
    with tempfile.TemporaryDirectory(prefix="forensics-cores-") as tmp:
        tmpd = Path(tmp)
        if shutil.which("lnav"):
            w, rss, _ = run_lnav(log, tmp)
            rows.append(("lnav: load + count checksum lines (SQL)", w, rss))
        w, rss, _ = timed(ingest_cmd(log, tmpd / "all.duckdb"))
        rows.append((f"forensics ingest, {have} cores", w, rss))
        report = [sys.executable, "-m", "forensics", "report", "--db", str(tmpd / "all.duckdb")]
        w, rss, _ = timed(report)
        rows.append((f"forensics report, {have} cores", w, rss))
        w, rss, _ = timed(entries_alone_cmd(log, tmpd / "e.duckdb"))
        rows.append((f"{ENTRIES_ALONE}, {have} cores", w, rss))
        usable = [c for c in cores if c < have]
        if usable and not pinning_works():
            print("taskset does not restrict children here: no rows for fewer cores\n")
            usable = []
        for c in usable:
            # lnav held to the same cores: the target is a ratio on c cores, not against
            # an lnav that had the whole machine
            if shutil.which("lnav"):
                w, rss, _ = run_lnav(log, tmp, wrap=lambda cmd, c=c: pinned(cmd, c))
                rows.append((f"lnav, {c} cores (taskset)", w, rss))
            w, rss, _ = timed(pinned(ingest_cmd(log, tmpd / f"c{c}.duckdb"), c))
            rows.append((f"forensics ingest, {c} cores (taskset)", w, rss))
            shutil.rmtree(tmpd / f"c{c}.shards", ignore_errors=True)
            (tmpd / f"c{c}.duckdb").unlink()
    lnav_on = {r[0].rsplit(", ", 1)[-1] if "," in r[0] else "all": r[1] for r in rows
               if r[0].startswith("lnav")}  # fmt: skip
    print("| what | s | MB/s | peak RSS MB | × lnav on the same cores |")
    print("|---|---:|---:|---:|---:|")
    for name, w, rss in rows:
        lnav = lnav_on.get(name.rsplit(", ", 1)[-1], lnav_on.get("all"))
        compared = lnav and "report" not in name and not name.startswith("lnav")
        vs = f"{lnav / w:.1f}" if compared else "-"
        print(f"| {name} | {w:.2f} | {mb / w:,.0f} | {rss:,} | {vs} |")
    lnav = rows[0][1] if rows and rows[0][0].startswith("lnav") else None
    if lnav:
        first = rows[1][1] + rows[2][1]
        print(f"\ntime to first answer ({have} cores): {first:.2f} s = {lnav / first:.2f}× lnav")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="store_true", help="generate both journals, then stop")
    ap.add_argument("--shape", choices=sorted(LINES), action="append")
    ap.add_argument("--cores", default="2,4,8", help="core counts for the taskset rows")
    args = ap.parse_args()
    if args.build:
        # two generators side by side: each is one Python thread
        with ProcessPoolExecutor(2) as pool:
            for path in pool.map(journal, sorted(LINES)):
                print(f"{path.name}: {path.stat().st_size / 2**20:,.0f} MB")
        return
    for shape in args.shape or sorted(LINES, reverse=True):
        bench(shape, [int(c) for c in args.cores.split(",")])


if __name__ == "__main__":
    main()
