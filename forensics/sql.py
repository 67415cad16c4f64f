"""Ad-hoc SQL over the database, read-only, in the formats a user pipes onwards."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import orjson

from .errors import ForensicsError
from .store import connect_read_only

OUTPUT_FORMATS = ("table", "csv", "json", "parquet")


def query(sql: str, db: str | os.PathLike | None = None) -> tuple[list[str], list[tuple]]:
    """Column names and rows of one read-only query."""
    con = connect_read_only(db)
    try:
        rel = con.sql(sql)
        if rel is None:
            return [], []
        return list(rel.columns), rel.fetchall()
    except duckdb.Error as exc:
        raise ForensicsError(f"SQL error: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def export(sql: str, fmt: str, out: str | os.PathLike | None, db=None) -> str | None:
    """Write the result as csv/json/parquet to `out` (or return csv/json text when out is None)."""
    if fmt not in OUTPUT_FORMATS or fmt == "table":
        raise ForensicsError(
            f"unknown output format {fmt!r}; use one of {', '.join(OUTPUT_FORMATS)}"
        )
    if fmt == "parquet" and out is None:
        raise ForensicsError("--format parquet needs --out FILE")
    con = connect_read_only(db)
    try:
        rel = con.sql(sql)
        if rel is None:
            raise ForensicsError("the statement returned no rows to export")
        if fmt == "parquet":
            rel.write_parquet(str(out))
            return None
        if fmt == "csv":
            if out is not None:
                rel.write_csv(str(out))
                return None
            return rel.pl().write_csv()
        cols = rel.columns
        data = [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
        text = orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2).decode()
        if out is not None:
            Path(out).write_text(text + "\n")
            return None
        return text
    except duckdb.Error as exc:
        raise ForensicsError(f"SQL error: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
