"""What DuckDB alone costs to keep every entry and record of a file, stored the way ingest
stores them (the cost of this storage design, not a floor for every design).

    python3 bench/store_floor.py FILE

Parses FILE first (not timed), then times, on one connection in one transaction as
`forensics ingest` does: appending the entry batches, appending the record frames, and
the commit. Prints one line of JSON. No ingest of this design can be faster than this sum.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import orjson
from forensics.parsers.journald import ReadContext, read_entries, sniff

from forensics import store
from forensics.store import ingest, records


def main(path: str) -> None:
    with open(path, "rb") as fh:
        fmt = sniff(fh.read(1 << 16))
    with open(path, "rb") as fh:
        batches = list(read_entries(fh, fmt, ReadContext(path)))
    frames = [records._batch_records(b, []) for b in batches]
    with tempfile.TemporaryDirectory(prefix="forensics-floor-") as tmp:
        con = store.connect(Path(tmp) / "floor.duckdb")
        con.execute("SET threads = 1")
        sink = records.RecordSink(con, 1, "floor")
        cols = ingest._insert_columns(1)
        con.execute("BEGIN")
        t0 = time.perf_counter()
        for b in batches:
            con.from_arrow(b).select(cols).insert_into("entries")
        t1 = time.perf_counter()
        for found, rejects in frames:
            sink._store(found, rejects)
        t2 = time.perf_counter()
        con.execute("COMMIT")
        t3 = time.perf_counter()
        sink.close()
        con.close()
    doc = {"entries_s": t1 - t0, "records_s": t2 - t1, "commit_s": t3 - t2, "total_s": t3 - t0}
    print(orjson.dumps(doc).decode())


if __name__ == "__main__":
    main(sys.argv[1])
