"""After a source's entries are stored: its forensic records into their tables."""

from __future__ import annotations

import duckdb
import polars as pl

from .parsers.records import parse_records
from .store import first_row

TABLES = {"checksum": "checksums", "canary": "canary", "step": "steps"}
WINDOW = 250_000  # entries per slice: memory stays bounded whatever the source's size
_CANDIDATES = """
    SELECT entry_no, line_first, host, ts_us, message, fields FROM entries
    WHERE source_id = ? AND entry_no >= ? AND entry_no < ?
      AND (message LIKE '%forensics:%' OR fields LIKE '%"FORENSICS_KIND"%')
    ORDER BY entry_no
"""


def extract_records(
    con: duckdb.DuckDBPyConnection, source_id: int, run: str
) -> tuple[dict[str, int], list[tuple[int, str, str]]]:
    """Counts stored per kind, and rejected records as (line, reason, message)."""
    counts = dict.fromkeys(TABLES, 0)
    rejects: list[tuple[int, str, str]] = []
    lo, hi = first_row(
        con, "SELECT min(entry_no), max(entry_no) FROM entries WHERE source_id = ?", [source_id]
    )
    if lo is None:
        return counts, rejects
    columns = {t: [c[0] for c in con.execute(f"DESCRIBE {t}").fetchall()] for t in TABLES.values()}
    for start in range(lo, hi + 1, WINDOW):
        entries = con.sql(_CANDIDATES, params=[source_id, start, start + WINDOW]).pl()
        if entries.is_empty():
            continue
        recs = parse_records(entries)
        origin = entries.select(
            row=pl.int_range(pl.len(), dtype=pl.Int64), host="host", ts_us="ts_us",
            entry_no="entry_no",
        )  # fmt: skip
        for kind, table in TABLES.items():
            df = getattr(recs, kind)
            if df.is_empty():
                continue
            df = origin.join(df, on="row").with_columns(
                run=pl.lit(run), source_id=pl.lit(source_id, pl.Int32)
            )
            con.from_arrow(df.select(columns[table]).to_arrow()).insert_into(table)
            counts[kind] += len(df)
        lines = entries["line_first"].to_list()
        msgs = entries["message"].to_list()
        rejects += [(lines[row], reason, msgs[row] or "") for row, reason in recs.rejects]
    return counts, rejects
