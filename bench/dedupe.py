"""Dedupe's cost, this tree against an earlier revision, interleaved round by round.

    python3 bench/dedupe.py --base 1d2c74e [--lines 400000] [--rounds 3]

Two cases on one generated journal (bench/generate.py, through the real systemd tools):
`pair`: its json rendering stored, then its short-iso-precise rendering ingested (the
second ingest alone is timed: every entry of it is a copy, found by alignment here and by
the multiset match before); `folder`: a folder holding both renderings and a copy of the
text cut into pieces, ingested in one command (the pieces overlap the whole: every entry
dedupes against an earlier input of the same ingest). Wall time and peak RSS (GNU time)
of each, and the entries stored, which must agree between the trees.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402
from interleaved import base_tree  # noqa: E402
from run import ingest_cmd, timed  # noqa: E402


def _entries(tree: Path, db: Path) -> int:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "forensics", "sql", "SELECT count(*) FROM entries",
         "--db", str(db), "--format", "csv"], cwd=tree, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return int(out.strip().splitlines()[-1])


def _pieces(text: Path, where: Path, n: int) -> list[Path]:
    """The text rendering cut into `n` pieces at line starts (no multi-line entry split:
    a cut goes before a line that starts with a year)."""
    data = text.read_bytes()
    out, start = [], 0
    for k in range(1, n + 1):
        end = len(data) if k == n else data.find(b"\n20", len(data) * k // n) + 1
        p = where / f"piece-{k:02d}.log"
        p.write_bytes(data[start:end])
        out.append(p)
        start = end
    return out


def _run(tree: Path, case: str, files: dict, db: Path) -> tuple[float, int] | None:
    """(wall s, peak MB) of the timed ingest, None where it failed (the base's folder of
    every rendering did: issue 50)."""
    import os

    here = os.getcwd()
    os.chdir(tree)
    try:
        if case == "pair":
            timed(ingest_cmd(files["json"], db, tree))
            wall, rss, _ = timed(ingest_cmd(files["short-iso-precise"], db, tree))
        else:
            wall, rss, _ = timed(ingest_cmd(files["folder"], db, tree))
    except SystemExit as exc:
        print(f"  failed: {str(exc).splitlines()[-1][:200]}", flush=True)
        return None
    finally:
        os.chdir(here)
    return wall, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="a revision of this repository")
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pieces", type=int, default=21)
    args = ap.parse_args()
    files = dict(generate.build(HERE / "out", args.lines, "mixed", json=True))
    with tempfile.TemporaryDirectory(prefix="forensics-dedupe-") as tmp:
        tmpd = Path(tmp)
        folder = tmpd / "folder"
        folder.mkdir()
        for fmt in ("json", "short-iso-precise"):
            (folder / files[fmt].name).symlink_to(files[fmt])
        _pieces(files["short-iso-precise"], folder, args.pieces)
        files["folder"] = folder
        mb = sum(p.resolve().stat().st_size for p in folder.iterdir()) / 2**20
        print(f"{args.lines:,} lines; folder of {args.pieces + 2} inputs, {mb:,.0f} MB\n")
        (tmpd / "base").mkdir()
        trees = {"this tree": HERE.parent, "base": base_tree(args.base, tmpd / "base")}
        walls: dict[tuple[str, str], list[float]] = {}
        for case in ("pair", "folder"):
            print(f"{case}: | round | " + " | ".join(f"{n} s (peak MB, entries)" for n in trees))
            for r in range(1, args.rounds + 1):
                cells = {}
                for name, tree in list(trees.items())[:: 1 if r % 2 else -1]:
                    db = tmpd / f"{case}-{r}-{name.replace(' ', '_')}.duckdb"
                    got = _run(tree, case, files, db)
                    if got is None:
                        cells[name] = "failed"
                        continue
                    walls.setdefault((case, name), []).append(got[0])
                    cells[name] = f"{got[0]:.2f} ({got[1]:,}, {_entries(tree, db):,})"
                print(f"| {r} | " + " | ".join(cells[n] for n in trees) + " |", flush=True)
            mid = {n: statistics.median(walls[case, n]) for n in trees if walls.get((case, n))}
            if len(mid) == 2:
                print(f"{case}: median this tree / base = {mid['this tree'] / mid['base']:.2f}\n")


if __name__ == "__main__":
    main()
