"""Storage as Parquet shards: K inputs on K worker processes against one input on one,
a local Ray against local processes, and the incident folder against the old database.

    python3 bench/shards.py [--lines 400000] [--k 1,2,4,8,16] [--ray] [--skip-size]
                            [--decode-lines 1000000]

The inputs are the mixed journal of bench/run.py (same generator and seed) at `--lines`
entries, K copies with the hosts renamed (prefill-i, decode-i) so that no two hold the
same entries: K hosts' journals of one incident. Every figure is a ratio within this run:
throughput with K workers over K times one worker's (the target is 0.8 or more), Ray's
wall time over the local processes' for the same inputs (after Ray's start-up, which
`ray start` pays before the clock runs), the incident folder's bytes over what the same
rows take as DuckDB tables (the store before schema 7, written from the same catalog).
Peak RSS is GNU time's: the largest single process (one worker).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402
import orjson  # noqa: E402
from run import timed  # noqa: E402


def variants(lines: int, k: int) -> list[Path]:
    """k journals of k host pairs, cached beside the generator's output."""
    src = generate.build(HERE / "out", lines, "mixed", json=False)["short-iso-precise"]
    data = None
    out = []
    for i in range(k):
        p = HERE / "out" / f"hosts-{lines}-{i}.log"
        if not p.exists():
            data = data if data is not None else src.read_bytes()
            p.write_bytes(data.replace(b" prefill-0 ", f" prefill-{i} ".encode())
                          .replace(b" decode-0 ", f" decode-{i} ".encode()))  # fmt: skip
        out.append(p)
    return out


def ingest(paths: list[Path], db: Path, workers: int) -> tuple[float, int, dict]:
    """Wall s, peak RSS MB and ingest's own phase timings (read, register, derived)."""
    cmd = [sys.executable, "-m", "forensics", "ingest", *map(str, paths), "--db", str(db),
           "--workers", str(workers), "--json"]  # fmt: skip
    w, rss, out = timed(cmd)
    return w, rss, orjson.loads(out).get("timings", {})


def folder_bytes(db: Path) -> int:
    from forensics.store.shards import folder

    return db.stat().st_size + sum(f.stat().st_size for f in folder(db).rglob("*") if f.is_file())


def scaling(ks: list[int], lines: int, tmp: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    ks = [k for k in ks if k <= cores]
    files = variants(lines, max(ks))
    mb = files[0].stat().st_size / 2**20
    print(f"\nK inputs on K workers ({cores} cores; each input {mb:,.0f} MB, {lines:,} "
          "entries):\n")  # fmt: skip
    print("One worker alone uses more than one core (block and record parsing threads); the"
          " last ratio is against one worker held to one core (taskset), what each of K"
          " workers gets when K is the number of cores.\n")  # fmt: skip
    print("| K | s | MB/s | × (K × one worker) | × (K × one worker on one core) | read s |"
          " register s | answers' rows s | peak RSS MB (one worker) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    # one worker pinned to one core: what a worker does on its share when K = the cores
    pin = ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
    w1, _, _ = timed([*pin, sys.executable, "-m", "forensics", "ingest", str(files[0]),
                      "--db", str(tmp / "core.duckdb")])  # fmt: skip
    core = mb / w1
    one = None
    for k in ks:
        db = tmp / f"k{k}.duckdb"
        w, rss, t = ingest(files[:k], db, k)
        thr = k * mb / w
        one = one or thr
        phases = " | ".join(f"{t.get(p, 0):.2f}" for p in ("read_s", "register_s", "derived_s"))
        print(f"| {k} | {w:.2f} | {thr:,.0f} | {thr / (k * one):.2f} | {thr / (k * core):.2f} |"
              f" {phases} | {rss:,} |")  # fmt: skip
        if k != ks[-1]:
            shutil.rmtree(db.with_suffix(".shards"), ignore_errors=True)
            db.unlink()


def size(lines: int, decode_lines: int, tmp: Path) -> None:
    """The folder against the old store's file, on the mixed journal and a record-heavy
    decode one."""
    from forensics.store.legacy import write_legacy

    print("\n| journal | input MB | incident folder MB (catalog + shards) | as DuckDB tables MB |"
          " × the old file |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for shape, n in (("mixed", lines), ("decode", decode_lines)):
        if not n:
            continue
        log = generate.build(HERE / "out", n, shape, json=False)["short-iso-precise"]
        db = tmp / f"size-{shape}.duckdb"
        ingest([log], db, 1)
        old = write_legacy(db, tmp / f"size-{shape}-legacy.duckdb")
        new_b, old_b = folder_bytes(db), old.stat().st_size
        print(f"| {shape}, {n:,} entries | {log.stat().st_size / 2**20:,.0f} | {new_b / 2**20:,.1f}"
              f" ({db.stat().st_size / 2**20:,.1f} + {(new_b - db.stat().st_size) / 2**20:,.1f})"
              f" | {old_b / 2**20:,.1f} | {new_b / old_b:.2f} |")  # fmt: skip


def on_ray(k: int, lines: int, tmp: Path) -> None:
    import ray

    files = variants(lines, k)
    subprocess.run(["ray", "start", "--head", f"--num-cpus={k}", "--include-dashboard=false",
                    "--disable-usage-stats"], check=True, capture_output=True)  # fmt: skip
    try:
        ray.init(address="auto", log_to_driver=False)
        address = ray.nodes()[0]["NodeManagerAddress"]
        ray.shutdown()
        local_w, _, _ = ingest(files, tmp / "local.duckdb", k)
        cmd = [
            sys.executable,
            "-m",
            "forensics",
            "ingest",
            "--ray",
            "--ray-address",
            "auto",
            "--db",
            str(tmp / "ray.duckdb"),
            "--json",
            *(f"{address}:{f}" for f in files),
        ]
        ray_w, _rss, _ = timed(cmd)
        shared = tmp / "shared"
        shared.mkdir()
        cmd[cmd.index("--json")] = f"--ray-shared={shared}"
        cmd[cmd.index("--db") + 1] = str(tmp / "ray-shared.duckdb")
        shared_w, _, _ = timed([*cmd, "--json"])
    finally:
        subprocess.run(["ray", "stop", "--force"], capture_output=True)
    print(f"\nRay ({k} inputs, a local Ray of {k} CPUs, started before the clock):\n")
    print("| how | s | × local processes |")
    print("|---|---:|---:|")
    print(f"| local processes (--workers {k}) | {local_w:.2f} | 1.00 |")
    print(f"| Ray, files back through the object store | {ray_w:.2f} | {ray_w / local_w:.2f} |")
    print(f"| Ray, files in a shared folder | {shared_w:.2f} | {shared_w / local_w:.2f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=400_000)
    ap.add_argument("--k", default="1,2,4,8,16")
    ap.add_argument("--ray", action="store_true", help="also time a local Ray (needs ray)")
    ap.add_argument("--skip-size", action="store_true")
    ap.add_argument(
        "--decode-lines",
        type=int,
        default=1_000_000,
        help="entries of the record-heavy journal the size row reads (0: none)",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forensics-shards-") as tmp:
        scaling([int(k) for k in args.k.split(",")], args.lines, Path(tmp))
        if not args.skip_size:
            size(args.lines, args.decode_lines, Path(tmp))
        if args.ray:
            on_ray(min(2, len(os.sched_getaffinity(0))), args.lines, Path(tmp))


if __name__ == "__main__":
    main()
