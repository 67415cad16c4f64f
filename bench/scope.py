"""`report`, `dashboard` and `bundle` against a baseline commit, in the same run: no
slower for reading through one scope (issue 32).

    python3 bench/scope.py [--baseline REV] [--lines 400000] [--repeats 3]

One mixed journal (bench/generate.py) ingested once by each version (the catalog each
writes is its own); then each command runs `repeats` times for each version, the two
interleaved so that drift hits both; the medians and their ratio (this / baseline) are
printed. The baseline runs from a `git worktree` of REV, imported ahead of the editable
install (its parsers/, queries/ and dashboards/ linked in as forensics' subpackages,
as setuptools' package-dir maps them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from generate import build  # noqa: E402

COMMANDS = {
    "report": ["report"],
    "dashboard": ["dashboard", "--out", "{tmp}/d.html"],
    "bundle": ["bundle", "--out", "{tmp}/b.tar.zst"],
}


def baseline_tree(rev: str, where: Path) -> Path:
    """An importable tree of `rev`: forensics/ with its mapped subpackages linked in."""
    src = where / "src"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(src), rev],
                   check=True, capture_output=True)  # fmt: skip
    tree = where / "tree"
    tree.mkdir()
    (tree / "forensics").symlink_to(src / "forensics")
    for sub in ("parsers", "queries", "dashboards"):
        link = src / "forensics" / sub
        if not link.exists():
            link.symlink_to(src / sub)
    return tree


def run(env: dict, args: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "forensics", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="6909997")
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scope-") as t:
        tmp = Path(t)
        journal = build(tmp / "gen", a.lines, "mixed", json=False)["short-iso-precise"]
        tree = baseline_tree(a.baseline, tmp / "base")
        envs = {"baseline": {**os.environ, "PYTHONPATH": str(tree)}, "this": dict(os.environ)}
        try:
            for name, env in envs.items():
                db = tmp / f"{name}.duckdb"
                env["FORENSICS_DB"] = str(db)
                print(f"{name}: ingest {run(env, ['ingest', str(journal), '--run', 'b']):.1f} s")
            times: dict[tuple[str, str], list[float]] = {}
            for _ in range(a.repeats):
                for cmd, args in COMMANDS.items():
                    for name, env in envs.items():
                        filled = [x.replace("{tmp}", str(tmp / name)) for x in args]
                        (tmp / name).mkdir(exist_ok=True)
                        times.setdefault((cmd, name), []).append(run(env, filled))
            for cmd in COMMANDS:
                base = statistics.median(times[cmd, "baseline"])
                this = statistics.median(times[cmd, "this"])
                print(f"{cmd}: this {this:.2f} s, baseline {base:.2f} s = {this / base:.2f}×")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tmp / "base" / "src")], capture_output=True)  # fmt: skip


if __name__ == "__main__":
    main()
