"""Where DuckDB over a shard set stops: a generated incident of N entries (N/10 checksum
records, pairs of rooms) as shard folders of the real layout, registered in a catalog,
and the answers' SQL timed on it at two memory limits. For docs/scale-out.md.

    python3 bench/scale_out.py [--entries 100000000] [--sources 100] [--memory 1GB,8GB]

The rows are written by DuckDB itself (range() and hash() for the text), as many files
as `--sources`; the catalog lists them exactly as ingest registers a source's files, so
the views are the product's views. Each query runs in a fresh process (`forensics sql`
would lock external access: the catalog's own connection reads the same views); its wall
time, peak RSS (GNU time) and the bytes DuckDB spilled to its temporary folder are
printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import timed  # noqa: E402

ENTRY = """
SELECT (i * 1000)::BIGINT AS entry_no, (1795000000000000 + i * 1000)::BIGINT AS ts_us,
       i::BIGINT AS mono_us, 'boot' || ({sid} % 4) AS boot_id,
       CASE WHEN {sid} % 2 = 0 THEN 'prefill-' ELSE 'decode-' END || ({sid} // 2) AS host,
       'sglang.service' AS unit, 'python3' AS ident, (1000 + {sid})::BIGINT AS pid,
       6::TINYINT AS priority,
       CASE WHEN i % 10 = 0
            THEN 'forensics:checksum side=' || CASE WHEN {sid} % 2 = 0 THEN 'src' ELSE 'dst' END
                 || ' room=' || (i // 10) || ' buf=kv full=' || hash(i // 10)
            ELSE '[2026-11-29 07:00:01 DP0 TP0] Decode batch, #running-req: ' || (i % 64)
                 || ', #token: ' || hash(i) % 100000 || ', token usage: 0.' || (i % 97)
       END AS message,
       NULL::BLOB AS message_raw, NULL::VARCHAR AS cursor, i::BIGINT AS line_first,
       i::BIGINT AS line_last, false AS truncated, false AS invalid_utf8,
       NULL::VARCHAR AS line_break, NULL::VARCHAR AS fields, 1::SMALLINT AS parts,
       hash(i, {sid}) AS key
FROM range({start}, {stop}) t(i)
"""

CHECKSUM = """
SELECT 'default' AS run,
       CASE WHEN {sid} % 2 = 0 THEN 'prefill-' ELSE 'decode-' END || ({sid} // 2) AS host,
       (1795000000000000 + i * 10000)::BIGINT AS ts_us, (i * 10)::BIGINT AS entry_no,
       CASE WHEN {sid} % 2 = 0 THEN 'src' ELSE 'dst' END AS side, (i + {pair}::UBIGINT * 1000000000)::UBIGINT AS room,
       'r' || i AS rid, 'kv' AS buf, 'all' AS layer, 0::BIGINT AS tp, 'bf16' AS dtype,
       4096::BIGINT AS nbytes, NULL::VARCHAR AS head, NULL::VARCHAR AS tail,
       (CASE WHEN {sid} % 2 = 1 AND i % 997 = 0 THEN 'bad' ELSE '' END || hash(i))::VARCHAR AS "full",
       NULL::VARCHAR AS extra
FROM range({start}, {stop}) t(i)
"""

QUERIES = {
    "count entries per host": "SELECT host, count(*) FROM entries GROUP BY host",
    "LIKE scan of every message": "SELECT count(*) FROM entries WHERE message LIKE '%#running-req: 63,%'",
    "rooms view: verdict counts": "SELECT verdict, count(*) FROM rooms GROUP BY verdict",
    "rooms view: the worst rooms": "SELECT * FROM rooms WHERE verdict <> 'match' ORDER BY room LIMIT 20",
    "one source's entries (file pruning)": "SELECT count(*) FROM entries WHERE source_id = 7",
    "dedupe's key join (a new source against all)": (
        "SELECT count(*) FROM entries e SEMI JOIN (SELECT key FROM entries WHERE source_id = 1) n"
        " ON e.key = n.key WHERE e.source_id <> 1"
    ),
}

RUNNER = r"""
import sys, time, duckdb, os
db, sql, mem, tmp = sys.argv[1:5]
con = duckdb.connect(db, read_only=True)
con.execute(f"SET memory_limit = '{mem}'")
con.execute(f"SET temp_directory = '{tmp}'")
con.execute("SET file_search_path = ?", [os.path.dirname(os.path.abspath(db))])
t = time.perf_counter()
rows = con.execute(sql).fetchall()
print(time.perf_counter() - t, len(rows))
"""


def build(where: Path, entries: int, sources: int) -> Path:
    import duckdb

    from forensics.store import connect
    from forensics.store.database import reinstall
    from forensics.store.shards import folder, source_folder

    db = where / "big.duckdb"
    con = connect(db)
    root = folder(db)
    per = entries // sources
    work = duckdb.connect()
    work.execute(f"SET threads = {os.cpu_count()}")
    t = time.perf_counter()
    for sid in range(1, sources + 1):
        d = source_folder(root, sid)
        d.mkdir(parents=True)
        start, stop = (sid - 1) * per, sid * per
        for table, sql, rng in (
            ("entries", ENTRY, (start, stop)),
            ("checksums", CHECKSUM, (start // 10, stop // 10)),
        ):
            f = d / f"{table}-gen.parquet"
            body = sql.format(sid=sid, start=rng[0], stop=rng[1], pair=(sid - 1) // 2)
            work.execute(f"COPY ({body}) TO '{f}' (FORMAT parquet, COMPRESSION zstd, "
                         "ROW_GROUP_SIZE 131072)")  # fmt: skip
            n = rng[1] - rng[0]
            con.execute("INSERT INTO shards VALUES (?, ?, ?, ?, ?)",
                        [str(f.relative_to(where)), sid, table, n, f.stat().st_size])  # fmt: skip
        con.execute("INSERT INTO sources (source_id, run, path, sha256) VALUES (?, 'default', ?, ?)",
                    [sid, f"gen-{sid}", f"sha-{sid}"])  # fmt: skip
    con.execute("INSERT INTO runs (run) VALUES ('default')")
    reinstall(con)
    con.close()
    size = sum(f.stat().st_size for f in root.rglob("*.parquet"))
    print(
        f"shard set: {entries:,} entries, {entries // 10:,} checksums in {sources} sources, "
        f"{size / 2**30:.2f} GiB of Parquet, written in {time.perf_counter() - t:.0f} s\n"
    )
    return db


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=100_000_000)
    ap.add_argument("--sources", type=int, default=100)
    ap.add_argument("--memory", default="1GB,8GB")
    ap.add_argument("--dir", default=None, help="where the shard set goes (default: a temp dir)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="forensics-scale-", dir=args.dir) as tmp:
        db = build(Path(tmp), args.entries, args.sources)
        print(f"{os.cpu_count()} cores\n")
        print("| query | memory limit | s | peak RSS MB | spilled MB | rows |")
        print("|---|---|---:|---:|---:|---:|")
        for name, sql in QUERIES.items():
            for mem in args.memory.split(","):
                spill = Path(tmp) / f"spill-{mem}"
                spill.mkdir(exist_ok=True)
                try:
                    _, rss, out = timed([sys.executable, "-c", RUNNER, str(db), sql, mem,
                                         str(spill)])  # fmt: skip
                    secs, rows = out.strip().splitlines()[-1].split()
                    spilled = sum(f.stat().st_size for f in spill.rglob("*") if f.is_file())
                    print(f"| {name} | {mem} | {float(secs):.2f} | {rss:,} | "
                          f"{spilled / 2**20:,.0f} | {rows} |", flush=True)  # fmt: skip
                except SystemExit as exc:
                    why = str(exc).strip().splitlines()[-1][:80]
                    print(f"| {name} | {mem} | failed | - | - | {why} |", flush=True)


if __name__ == "__main__":
    main()
