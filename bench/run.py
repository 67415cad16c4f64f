"""The benchmarks: one command, every figure measured in the same run on the same file.

    python3 bench/run.py [--lines 1500000] [--decode-lines 5000000] [--skip-scaling]
                         [--skip-dashboard] [--skip-repro] [--skip-suspects]

Generates (once, cached in bench/out/) an incident journal through the real systemd tools,
then times on it: `forensics ingest` (short-iso-precise and json renderings; and with record
parsing switched off, bench/entries_alone.py), the read
floor (`grep -c`), a hand-written DuckDB query, and lnav; then ingest at 1/4, 1/2 and the
whole file to show time is linear and memory flat; then lnav and ingest on a
record-heavy decode journal (94 % records, about 800 MB). Prints Markdown tables; ratios are
against lnav and grep measured here and now, never against remembered numbers. Then the
dashboard benchmark (bench/dashboard.py): HTML size, build and render time at 10 k, 100 k
and 1 M canary rows; then the reproducer's (bench/repro.py): requests/s of `forensics repro`
against the stand-in server and the harness's cost against bare clients; then
`forensics suspects` on 10 k requests and 100 predicates (bench/suspects.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import generate  # noqa: E402
import orjson  # noqa: E402

DUCKDB_QUERY = r"""
import duckdb, sys
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
q = '''
WITH lines AS (
  SELECT line FROM read_csv(?, columns = {'line': 'VARCHAR'}, delim = '\x01', quote = '',
                            escape = '', header = false, ignore_errors = true)
), ck AS (
  SELECT regexp_extract(line, 'forensics:checksum side=(\w+) room=(\d+) .* full=(\w+)',
                        ['side', 'room', 'full']) AS c
  FROM lines WHERE line LIKE '%forensics:checksum%'
)
SELECT count(*), count(*) FILTER (WHERE s.full <> d.full) FROM
  (SELECT c.room, c.full FROM ck WHERE c.side = 'src') s
  JOIN (SELECT c.room, c.full FROM ck WHERE c.side = 'dst') d USING (room)
'''
print(con.execute(q, [sys.argv[1]]).fetchall())
"""


def timed(cmd: list[str], **kw) -> tuple[float, int, str]:
    """Wall seconds, peak RSS in MB and stdout of one child process.

    The peak is GNU time's (%M): the rusage of a child this process forks would start
    from this process's own pages and hide a smaller child's peak.
    """
    with tempfile.NamedTemporaryFile(prefix="forensics-rss-") as rss_file:
        gnu_time = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name]
        t = time.perf_counter()
        proc = subprocess.run([*gnu_time, *cmd], capture_output=True, **kw)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise SystemExit(
                f"benchmark step failed: {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}"
            )
        peak_kb = int(Path(rss_file.name).read_text().split()[-1])
    return wall, peak_kb // 1024, proc.stdout.decode(errors="replace")


def ingest_cmd(path: Path, db: Path, tree: Path = HERE.parent) -> list[str]:
    """`forensics ingest` of `path` as the tree `tree` runs it (compiled first)."""
    compiled(tree)
    return [sys.executable, "-m", "forensics", "ingest", str(path), "--db", str(db), "--json"]


def compiled(tree: Path) -> Path:
    """`tree`'s modules compiled to bytecode, as an installed package's are (pip compiles
    a wheel's at install, and Python caches what it imports). An environment that sets
    PYTHONDONTWRITEBYTECODE, as this dev machine's does, would otherwise compile every
    module on every run: 0.1 s of each ingest, which no user pays."""
    import compileall

    for name in ("forensics", "parsers", "queries", "dashboards"):
        if (tree / name).is_dir():
            compileall.compile_dir(tree / name, quiet=1)
    return tree


ENTRIES_ALONE = "forensics ingest, entries alone (record parsing switched off)"


def entries_alone_cmd(path: Path, db: Path) -> list[str]:
    return [sys.executable, str(HERE / "entries_alone.py"), str(path), str(db)]


def prefix(src: Path, fraction: float, out: Path) -> Path:
    """The first part of a rendering, cut where an entry starts."""
    size = int(src.stat().st_size * fraction)
    with open(src, "rb") as fh:
        data = fh.read(size)
    cut = data.rfind(b"\n2026-") + 1
    out.write_bytes(data[:cut])
    return out


def count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            n += chunk.count(b"\n")
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_500_000)
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-dashboard", action="store_true")
    ap.add_argument("--skip-repro", action="store_true")
    ap.add_argument("--skip-suspects", action="store_true")
    ap.add_argument(
        "--decode-lines", type=int, default=5_000_000,
        help="entries of the record-heavy decode journal (0: skip it)",
    )  # fmt: skip
    args = ap.parse_args()
    ingest_benchmark(args)
    if args.decode_lines:
        record_heavy(args.decode_lines)
    if not args.skip_dashboard:
        import dashboard  # bench/dashboard.py

        print("\ndashboard (bench/dashboard.py):\n")
        dashboard.main([])
    if not args.skip_repro:
        import repro  # bench/repro.py

        print("\nreproducer (bench/repro.py):")
        repro.main([])
    if not args.skip_suspects:
        import suspects  # bench/suspects.py

        suspects.main([])


def ingest_benchmark(args: argparse.Namespace) -> None:
    files = generate.build(HERE / "out", args.lines)
    log, js = files["short-iso-precise"], files["json"]
    mb = log.stat().st_size / 2**20
    n_lines = count_lines(log)
    js_mb = js.stat().st_size / 2**20
    print(f"incident: {log.name}: {n_lines:,} lines, {mb:,.0f} MB; {js.name}: {js_mb:,.0f} MB\n")
    rows: list[tuple[str, float, int, str]] = []
    with tempfile.TemporaryDirectory(prefix="forensics-bench-") as tmp:
        tmpd = Path(tmp)
        w, rss, out = timed(["grep", "-c", "forensics:checksum", str(log)])
        rows.append(("grep -c forensics:checksum (read floor)", w, rss, out.strip() + " lines"))
        w, rss, out = timed([sys.executable, "-c", DUCKDB_QUERY, str(log)])
        rows.append(("DuckDB read_csv + regexp_extract + src/dst join", w, rss, out.strip()))
        if shutil.which("lnav"):
            w, rss, out = run_lnav(log, tmp)
            rows.append(("lnav: load + count checksum lines (SQL)", w, rss, " ".join(out.split())))
        else:
            print("lnav not installed (apt-get install lnav): its row is missing\n")
        w, rss, _ = timed(ingest_cmd(log, tmpd / "a.duckdb"))
        rows.append(("forensics ingest (short-iso-precise, every entry)", w, rss, ""))
        w, rss, out = timed(entries_alone_cmd(log, tmpd / "e.duckdb"))
        rows.append((ENTRIES_ALONE, w, rss, f"{int(out):,} entries"))
        w, rss, _ = timed(ingest_cmd(js, tmpd / "b.duckdb"))
        rows.append((f"forensics ingest (json, {js.stat().st_size / 2**20:,.0f} MB)", w, rss, ""))
        floor = orjson.loads(timed([sys.executable, str(HERE / "store_floor.py"), str(log)])[2])
        rows.append((
            "storing alone, the old design: DuckDB tables, append + commit",
            floor["tables_s"], 0,
            f"entries {floor['tables_entries_s']:.2f} + records {floor['tables_records_s']:.2f} "
            f"+ commit {floor['tables_commit_s']:.2f} s; {floor['tables_bytes'] / 2**20:,.0f} MB",
        ))  # fmt: skip
        rows.append((
            "storing alone, this design: Parquet shards (zstd)",
            floor["shards_s"], 0,
            f"entries {floor['shards_entries_s']:.2f} + records {floor['shards_records_s']:.2f}"
            f" s; {floor['shards_bytes'] / 2**20:,.0f} MB",
        ))  # fmt: skip
        lnav = next((r[1] for r in rows if r[0].startswith("lnav")), None)
        grep = rows[0][1]
        print("| what | s | lines/s | MB/s | peak RSS MB | × lnav | × grep | result |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for name, w, rss, res in rows:
            vs_lnav = f"{lnav / w:.1f}" if lnav else "-"
            print(f"| {name} | {w:.2f} | {n_lines / w:,.0f} | {mb / w:,.0f} | {rss or '-'} | "
                  f"{vs_lnav} | {w / grep:.1f} | {res[:60]} |")  # fmt: skip
        answers(tmpd / "a.duckdb", rows, lnav)
        if args.skip_scaling:
            return
        print("\nscaling (forensics ingest, short-iso-precise):\n")
        print("| size (× the file) | MB | s | s per 100 MB | peak RSS MB |")
        print("|---|---:|---:|---:|---:|")
        for frac in (0.25, 0.5, 1.0, 4.0):
            if frac == 4.0:
                # 3 GB: the whole rendering four times over (the copies, one source, are
                # all stored: dedupe only drops entries another source holds).
                part = tmpd / "x4.log"
                with open(part, "wb") as out:
                    for _ in range(4):
                        with open(log, "rb") as fh:
                            shutil.copyfileobj(fh, out, 1 << 24)
            else:
                part = log if frac == 1.0 else prefix(log, frac, tmpd / f"part-{frac}.log")
            size = part.stat().st_size / 2**20
            w, rss, _ = timed(ingest_cmd(part, tmpd / f"s{frac}.duckdb"))
            print(f"| {Fraction(frac)} | {size:,.0f} | {w:.2f} | {w / size * 100:.2f} | {rss:,} |")
            if part != log:
                part.unlink()


def run_lnav(log: Path, home: str, wrap=lambda cmd: cmd) -> tuple[float, int, str]:
    """lnav loading the file and counting its checksum lines (its own HOME: no state)."""
    sql = ";SELECT count(*) AS n FROM all_logs WHERE log_body LIKE '%forensics:checksum%'"
    return timed(wrap(["lnav", "-n", "-c", sql, str(log)]), env={**os.environ, "HOME": home})


def record_heavy(lines: int) -> None:
    """The shape of a canary-instrumented decode host: 94 % of the lines are records."""
    log = generate.build(HERE / "out", lines, "decode")["short-iso-precise"]
    mb = log.stat().st_size / 2**20
    n_lines = count_lines(log)
    print(f"\nrecord-heavy decode journal: {log.name}: {n_lines:,} lines, {mb:,.0f} MB\n")
    rows: list[tuple[str, float, int]] = []
    with tempfile.TemporaryDirectory(prefix="forensics-bench-") as tmp:
        if shutil.which("lnav"):
            w, rss, _ = run_lnav(log, tmp)
            rows.append(("lnav: load + count checksum lines (SQL)", w, rss))
        w, rss, _ = timed(ingest_cmd(log, Path(tmp) / "d.duckdb"))
        rows.append(("forensics ingest (every entry, every record)", w, rss))
        w, rss, _ = timed(entries_alone_cmd(log, Path(tmp) / "e.duckdb"))
        rows.append((ENTRIES_ALONE, w, rss))
    lnav = next((r[1] for r in rows if r[0].startswith("lnav")), None)
    print("| what | s | lines/s | MB/s | peak RSS MB | × lnav |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, w, rss in rows:
        vs = f"{lnav / w:.1f}" if lnav else "-"
        print(f"| {name} | {w:.2f} | {n_lines / w:,.0f} | {mb / w:,.0f} | {rss:,} | {vs} |")


ANSWERS = (
    ("report", ["report"]), ("canary", ["canary"]), ("rooms", ["rooms"]),
    ("correlate", ["correlate"]), ("compare", ["compare"]), ("skew", ["skew"]),
    ("query rooms (terminal table)", ["query", "rooms"]),
    ("query requests (terminal table)", ["query", "requests"]),
    ("dashboard", ["dashboard", "--out"]),
)  # fmt: skip


def answers(db: Path, rows: list, lnav: float | None) -> None:
    """Each answer's command on the ingested database, start-up included, as a user runs
    it; then the time to a first answer (ingest + report) against lnav's load + query."""
    print("\nanswers (each command on the short-iso-precise database, start-up included):\n")
    print("| command | s | peak RSS MB |")
    print("|---|---:|---:|")
    took = {}
    for name, args in ANSWERS:
        extra = [str(db.with_suffix(".html"))] if args[-1] == "--out" else []
        cmd = [sys.executable, "-m", "forensics", *args, *extra, "--db", str(db)]
        w, rss, _ = timed(cmd)
        took[name] = w
        print(f"| forensics {' '.join(args + (['FILE'] if extra else []))} | {w:.2f} | {rss:,} |")
    ingest = next(r[1] for r in rows if r[0].startswith("forensics ingest (short"))
    first = ingest + took["report"]
    vs = f" = {lnav / first:.2f}× lnav's load + one query ({lnav:.2f} s)" if lnav else ""
    print(f"\ntime to first answer: ingest {ingest:.2f} s + report {took['report']:.2f} s = "
          f"{first:.2f} s{vs}")  # fmt: skip


if __name__ == "__main__":
    main()
