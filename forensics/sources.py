"""The sources table as dicts, newest last."""

from __future__ import annotations

import os

from .store import connect_read_only


def list_sources(db: str | os.PathLike | None = None) -> list[dict]:
    con = connect_read_only(db)
    try:
        rel = con.sql("SELECT * FROM sources ORDER BY source_id")
        cols = rel.columns
        return [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
    finally:
        con.close()
