"""What storing every entry and record of a file costs, in each of the two designs
measured: DuckDB tables in one transaction (the store before schema 7) and Parquet shards
(this one). The cost of each storage design, not a floor for every design.

    python3 bench/store_floor.py FILE

Parses FILE first, the entries' dedupe keys included (not timed), then times the same rows
stored both ways: appending the entry batches and the record frames to DuckDB tables (the
old DDL, one thread, as ingest ran it) and committing; writing them as shard files (zstd).
Prints one line of JSON with each design's seconds and bytes on disk.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import duckdb
import orjson
import polars as pl
from forensics.parsers.journald import ReadContext, read_entries, sniff
from forensics.parsers.tables import LEGACY, TABLES

from forensics.store import SCHEMA_VERSION, records, stage
from forensics.store.shards import ShardWriter


def _size(p: Path) -> int:
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return p.stat().st_size


def main(path: str) -> None:
    with open(path, "rb") as fh:
        fmt = sniff(fh.read(1 << 16))
    with open(path, "rb") as fh:
        batches = list(read_entries(fh, fmt, ReadContext(path)))
    frames = [records._batch_records(b, [])[0] for b in batches]
    keyer = duckdb.connect()
    keyer.execute("SET threads = 1")
    entries = [stage.keyed(keyer, b) for b in batches]  # the rows both designs store
    doc: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="forensics-floor-") as tmp:
        # the old design: every row into DuckDB tables, one transaction
        db = Path(tmp) / "tables.duckdb"
        con = duckdb.connect(str(db))
        # the old tables, and those added since that the records fill (lines)
        for name in dict.fromkeys([*LEGACY, *records.TABLES.values()]):
            con.execute(TABLES[name].ddl())
        con.execute("SET threads = 1")
        con.execute("BEGIN")
        t0 = time.perf_counter()
        for e in entries:
            con.from_arrow(e).select("1::INTEGER AS source_id, *").insert_into("entries")
        t1 = time.perf_counter()
        for found in frames:
            for kind, df in found.items():
                table = records.TABLES[kind]
                df = df.with_columns(run=pl.lit("floor"), source_id=pl.lit(1, pl.Int32))
                con.from_arrow(df.select(TABLES[table].names).to_arrow()).insert_into(table)
        t2 = time.perf_counter()
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
        t3 = time.perf_counter()
        con.close()
        doc |= {
            "tables_entries_s": t1 - t0,
            "tables_records_s": t2 - t1,
            "tables_commit_s": t3 - t2,
            "tables_s": t3 - t0,
            "tables_bytes": _size(db),
        }
        # this design: the same rows as a source's shard files
        where = Path(tmp) / "shards"
        where.mkdir()
        writer = ShardWriter(where, SCHEMA_VERSION)
        t0 = time.perf_counter()
        for e in entries:
            writer.write("entries", e)
        t1 = time.perf_counter()
        for found in frames:
            for kind, df in found.items():
                writer.write(records.TABLES[kind], df.with_columns(run=pl.lit("floor")).to_arrow())
        writer.close()
        t2 = time.perf_counter()
        doc |= {
            "shards_entries_s": t1 - t0,
            "shards_records_s": t2 - t1,
            "shards_s": t2 - t0,
            "shards_bytes": _size(where),
        }
    print(orjson.dumps(doc).decode())


if __name__ == "__main__":
    main(sys.argv[1])
