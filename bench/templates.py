"""Templates (issue 33): the deterministic masker against drain3, and what templates cost
ingest, against a baseline commit in the same run.

    python3 bench/templates.py [--baseline REV] [--lines 300000] [--repeats 3]

Grouping: a labelled corpus — the PD stack's real lines (tests/data/pd-stack-lines.tsv)
and Loghub-2.0-style shapes (hex, UUIDs, IPv4/IPv6 with ports, paths, durations and sizes
with units, quoted values, Python reprs, JSON) with their values drawn at random — in
two arrival orders. Grouping accuracy (Zhu et al., Loghub): the share of lines whose
group is exactly their label's lines. `orders agree`: the share of lines whose group
holds the same lines in both orders (a template id must not depend on arrival order).
drain3 needs `pip install drain3` (not a dependency: a bench comparison only).

Cost: one mixed journal (bench/generate.py; nearly every line a pattern's) and one of
lines no pattern names (bench/suspects.py's noise: every line masked), each ingested
`repeats` times by each version, interleaved; medians of wall time and the shard
folder's size, ratio this / baseline.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from generate import build  # noqa: E402
from scope import baseline_tree, run  # noqa: E402
from suspects import noise_lines  # noqa: E402

SHAPES = [
    "connection to {ip}:{port} timed out after {ms}ms",
    "request {uuid} finished in {s:.3f} s, {kb} KB sent",
    "loaded weights from {path} ({gb:.1f} GB)",
    "cache key 0x{hex} evicted, size={kb}KiB",
    "peer [{ip6}]:{port} closed the stream",
    "user said '{word} {n}' and left",
    "state: {{'rid': '{hex}', 'tokens': {n}, 'done': True}}",
    '{{"x_request_id": "{uuid}", "status": {code}, "latency_ms": {ms}}}',
    "worker {n} of {m} is ready",
    "worker {n} of {m} is gone",
]


def _value(rng: random.Random) -> dict:
    return {
        "ip": ".".join(str(rng.randrange(256)) for _ in range(4)), "port": rng.randrange(1, 65536),
        "ms": rng.randrange(10**6), "uuid": "-".join(
            f"{rng.getrandbits(4 * w):0{w}x}" for w in (8, 4, 4, 4, 12)),
        "s": rng.random() * 100, "kb": rng.randrange(10**7), "gb": rng.random() * 200,
        "path": "/" + "/".join(rng.choice(["opt", "models", "data", "v2", "shard"])
                               for _ in range(rng.randrange(1, 5))),
        "hex": f"{rng.getrandbits(64):x}", "ip6": f"fe80::{rng.getrandbits(16):x}",
        "word": rng.choice(["hi", "yes", "no"]), "n": rng.randrange(10**5),
        "m": rng.randrange(10**5), "code": rng.choice([200, 404, 500]),
    }  # fmt: skip


def corpus(per_shape: int = 40, seed: int = 7) -> list[tuple[str, str]]:
    """(label, line): the real labelled lines, and each shape with values drawn."""
    rows = []
    for raw in (ROOT / "tests" / "data" / "pd-stack-lines.tsv").read_text().splitlines():
        if raw and not raw.startswith("#"):
            label, _, line = raw.split("\t", 2)
            rows.append((f"real:{label}", line))
    rng = random.Random(seed)
    for k, shape in enumerate(SHAPES):
        rows += [(f"shape:{k}", shape.format(**_value(rng))) for _ in range(per_shape)]
    return rows


def grouping_accuracy(labels: list[str], groups: list) -> float:
    by_label: dict[str, set[int]] = {}
    by_group: dict[object, set[int]] = {}
    for i, (lab, g) in enumerate(zip(labels, groups, strict=True)):
        by_label.setdefault(lab, set()).add(i)
        by_group.setdefault(g, set()).add(i)
    ok = sum(by_label[lab] == by_group[g] for lab, g in zip(labels, groups, strict=True))
    return ok / len(labels)


def masker(lines: list[str]) -> list[int]:
    import polars as pl
    from forensics.parsers import templates

    return templates.template_ids(templates.mask(pl.Series(lines))).to_list()


def drain(lines: list[str]) -> list[int]:
    from drain3 import TemplateMiner

    miner = TemplateMiner()
    return [miner.add_log_message(line)["cluster_id"] for line in lines]


def _grouping() -> None:
    rows = corpus()
    order = list(range(len(rows)))
    random.Random(1).shuffle(order)
    for name, fn in (("masker", masker), ("drain3", drain)):
        try:
            first = fn([line for _, line in rows])
            t = time.perf_counter()
            shuffled = fn([rows[i][1] for i in order])
            secs = time.perf_counter() - t
        except ImportError:
            print(f"{name}: not installed")
            continue
        again = [None] * len(rows)
        for pos, i in enumerate(order):
            again[i] = shuffled[pos]
        labels = [lab for lab, _ in rows]
        merged = len({(g) for g in first}) < len(set(labels))
        print(f"{name}: grouping accuracy {grouping_accuracy(labels, first):.3f} "
              f"(shuffled {grouping_accuracy(labels, again):.3f}); orders agree "
              f"{grouping_accuracy([str(g) for g in first], again):.3f}; "
              f"{'merges labels' if merged else 'no labels merged'}; "
              f"{len(rows) / secs:,.0f} lines/s")  # fmt: skip


def _named_values() -> None:
    """The value namer on the labelled corpus of real lines (tests/data/named-values.tsv)."""
    sys.path.insert(0, str(ROOT))
    from tests.named_values import grouping, load, score

    rows = load()
    s = score(rows)
    print(f"named values: {s.lines} lines, {s.labels} labels: precision {s.precision:.3f}, "
          f"recall {s.recall:.3f}, lines understood in full {s.understood:.3f}")  # fmt: skip
    print(f"named-values corpus grouping: masker {grouping(rows):.3f}, as stored (a "
          f"pattern's lines its template) {grouping(rows, stored=True):.3f}")  # fmt: skip


def _cost(a: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-templates-") as t:
        tmp = Path(t)
        journals = {
            "mixed": build(tmp / "gen", a.lines, "mixed", json=False)["short-iso-precise"],
            "unnamed": noise_lines(tmp / "unnamed.log", a.lines, 500, 1_795_935_600_000_000,
                                   3_600_000_000, 0),
        }  # fmt: skip
        tree = baseline_tree(a.baseline, tmp / "base")
        envs = {"baseline": {**os.environ, "PYTHONPATH": str(tree)}, "this": dict(os.environ)}
        try:
            for shape, journal in journals.items():
                _ingests(a, tmp, envs, shape, journal)
        finally:
            import subprocess

            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tmp / "base" / "src")], capture_output=True)  # fmt: skip


def _ingests(a: argparse.Namespace, tmp: Path, envs: dict, shape: str, journal: Path) -> None:
    times: dict[str, list[float]] = {n: [] for n in envs}
    sizes: dict[str, int] = {}
    for _ in range(a.repeats):
        for name, env in envs.items():
            db = tmp / f"{name}.duckdb"
            db.unlink(missing_ok=True)
            shutil.rmtree(db.with_suffix(".shards"), ignore_errors=True)
            times[name].append(run(env, ["ingest", str(journal), "--db", str(db)]))
            sizes[name] = sum(f.stat().st_size for f in db.with_suffix(".shards").rglob("*")
                              if f.is_file())  # fmt: skip
    base, this = (statistics.median(times[n]) for n in ("baseline", "this"))
    mine, theirs = sizes["this"], sizes["baseline"]
    print(f"ingest {a.lines:,} {shape} lines: this {this:.2f} s, baseline {base:.2f} s = "
          f"{this / base:.2f}×; shards {mine / 2**20:.1f} MB vs {theirs / 2**20:.1f} MB = "
          f"{mine / theirs:.2f}×")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", default="5f6b0e2")
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-cost", action="store_true")
    a = ap.parse_args()
    _grouping()
    _named_values()
    if not a.skip_cost:
        _cost(a)


if __name__ == "__main__":
    main()
