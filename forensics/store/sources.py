"""The sources table as dicts, newest last."""

from __future__ import annotations

import os

from .database import connect_read_only


def list_sources(db: str | os.PathLike | None = None) -> list[dict]:
    con = connect_read_only(db)
    try:
        # The time as ISO text in UTC: DuckDB before 2.0 needs pytz to hand out a
        # TIMESTAMPTZ as a Python datetime.
        rel = con.sql(
            "SELECT * REPLACE (strftime(ingested_at AT TIME ZONE 'UTC',"
            " '%Y-%m-%dT%H:%M:%S.%fZ') AS ingested_at) FROM sources ORDER BY source_id"
        )
        cols = rel.columns
        return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
    finally:
        con.close()
