"""This tree's ingest against an earlier revision's and lnav, interleaved round by round on
the same pinned cores: on a machine whose speed drifts (a shared host), only ratios taken
within one round compare.

    python3 bench/interleaved.py --base 692c42d [--rounds 5] [--cores 2] [--shape mixed]
    python3 bench/interleaved.py --base-tree /tmp/base ...   # a tree unpacked elsewhere

Each round runs lnav, then this tree's `forensics ingest` and the base's in alternating
order, each on the first `cores` CPUs of distinct physical cores; it prints each round's
times and ratios, then the median of the per-round ratios and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cores  # noqa: E402
from run import ingest_cmd, run_lnav, timed  # noqa: E402

LINKED = ("parsers", "queries", "dashboards")  # package-dir folders, as the install maps them


def base_tree(rev: str, where: Path) -> Path:
    """`rev` of this repository unpacked in `where`, its folders where the package finds
    them (the editable install maps this checkout's, not the base's)."""
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev],
                             capture_output=True, check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    return linked(where)


def linked(tree: Path) -> Path:
    for name in LINKED:
        link = tree / "forensics" / name
        if not link.exists():
            link.symlink_to(Path("..") / name)
    return tree


def distinct_cores(n: int) -> str:
    """The first `n` usable CPUs on distinct physical cores (no two hyperthreads)."""
    out = subprocess.run(["lscpu", "-p=CPU,CORE"], capture_output=True, text=True).stdout
    usable, seen, pick = os.sched_getaffinity(0), set(), []
    for line in out.splitlines():
        if line and not line.startswith("#"):
            cpu, core = (int(x) for x in line.split(",")[:2])
            if cpu in usable and core not in seen:
                seen.add(core)
                pick.append(str(cpu))
    return ",".join(pick[:n])


def ingest(tree: Path, log: Path, db: Path, cpus: str) -> tuple[float, int]:
    cmd = ["taskset", "-c", cpus, *ingest_cmd(log, db, tree)]
    here = os.getcwd()
    os.chdir(tree)  # `-m forensics` imports the tree it runs in
    try:
        wall, rss, _ = timed(cmd)
    finally:
        os.chdir(here)
    return wall, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    base = ap.add_mutually_exclusive_group(required=True)
    base.add_argument("--base", help="a revision of this repository")
    base.add_argument("--base-tree", type=Path, help="a base tree already unpacked")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--shape", choices=sorted(cores.LINES), default="mixed")
    args = ap.parse_args()
    log = cores.journal(args.shape)
    cpus = distinct_cores(args.cores)
    print(f"{log.name}, {log.stat().st_size / 2**20:,.0f} MB; CPUs {cpus}\n", flush=True)
    with tempfile.TemporaryDirectory(prefix="forensics-ab-") as tmp:
        tmpd = Path(tmp)
        if args.base_tree:
            old = linked(args.base_tree)
        else:
            (tmpd / "base").mkdir()
            old = base_tree(args.base, tmpd / "base")
        trees = {"this tree": HERE.parent, "base": old}
        ratios: dict[str, list[float]] = {name: [] for name in trees}
        walls: dict[str, list[float]] = {name: [] for name in trees}
        lnavs: list[float] = []
        print("| round | lnav s | " + " | ".join(f"{n} s (× lnav, peak MB)" for n in trees) + " |")
        print("|---:|---:|" + "---:|" * len(trees))
        for r in range(1, args.rounds + 1):
            lnav, _, _ = run_lnav(log, tmp, wrap=lambda c: ["taskset", "-c", cpus, *c])
            lnavs.append(lnav)
            cells = {}
            # the trees' order alternates (ABBA): the run right after lnav's is not always
            # the same tree's
            for name, tree in list(trees.items())[:: 1 if r % 2 else -1]:
                db = tmpd / f"r{r}-{name.replace(' ', '_')}.duckdb"
                wall, rss = ingest(tree, log, db, cpus)
                ratios[name].append(lnav / wall)
                walls[name].append(wall)
                cells[name] = f"{wall:.2f} ({lnav / wall:.2f}×, {rss:,})"
            print(f"| {r} | {lnav:.2f} | " + " | ".join(cells[n] for n in trees) + " |",
                  flush=True)  # fmt: skip
    print()
    # On a shared host lnav's own time swings (17.6–24.3 s in one session): a round where
    # it ran slow flatters that round's ratio, so the medians' ratio is printed beside.
    lnav_mid = statistics.median(lnavs)
    for name, rs in ratios.items():
        print(f"{name}: median of the rounds' ratios {statistics.median(rs):.2f}× lnav "
              f"(rounds {min(rs):.2f}–{max(rs):.2f}×); median lnav / median ingest "
              f"{lnav_mid / statistics.median(walls[name]):.2f}×")  # fmt: skip


if __name__ == "__main__":
    main()
