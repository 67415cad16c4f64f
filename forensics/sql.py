"""Ad-hoc SQL over the database, read-only, in the formats a user pipes onwards.

Read-only for the machine too: the connection opens the file read-only, allows exactly the
registered shard files (the views read them), then turns off DuckDB's external access (no
other file reads or writes, no `COPY … TO`, `EXPORT DATABASE`, `ATTACH`, `INSTALL`,
extension downloads) and locks its configuration so that the statement cannot turn it
back on. Only one SELECT (or EXPLAIN) runs. The result files
that `--out` names are written by pd-forensics itself, whole or not at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import duckdb
import orjson

from .errors import ForensicsError
from .outputs import json_safe, replacing, write_text
from .scope import Db, scoped
from .store.database import shard_root
from .store.integrity import inside
from .store.shards import registered

OUTPUT_FORMATS = ("table", "csv", "json", "parquet")
ALLOWED = ("SELECT", "EXPLAIN")


def _statement_kind(sql: str) -> str:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ForensicsError(f"SQL error: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ForensicsError(f"sql runs one statement; got {len(statements)}")
    return str(statements[0].type).rsplit(".", 1)[-1]


@contextmanager
def guarded(db: Db = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection that cannot reach outside the database file. A connection
    or scope handed in is the caller's: used as it is (its settings are theirs)."""
    with scoped(db) as s:
        try:
            if s.owned:
                _lock(s.con)
            yield s.con
        except duckdb.Error as exc:
            raise ForensicsError(f"SQL error: {str(exc).splitlines()[0]}") from None


def _lock(con: duckdb.DuckDBPyConnection) -> None:
    root = shard_root(con)
    # only the registered files inside the folder (a path leaving it is never allowed)
    files = [str(f) for p in registered(con) if (f := inside(root, p)) is not None]
    if files:  # before the lock: the views' files, and nothing else
        con.execute("SET allowed_paths = ?", [files])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def _relation(
    con: duckdb.DuckDBPyConnection, sql: str
) -> tuple[duckdb.DuckDBPyRelation | None, str]:
    """The statement's relation (None: it returns no rows) and its kind (SELECT, EXPLAIN)."""
    kind = _statement_kind(sql)
    if kind not in ALLOWED:
        raise ForensicsError(f"sql is read-only: it runs a SELECT, not {kind}")
    return con.sql(sql), kind


if TYPE_CHECKING:
    import polars as pl

TABLE_ROWS = 40  # rows a terminal table shows unless --limit says otherwise


def query(sql: str, db: Db = None) -> pl.DataFrame:
    """One read-only query's result as a polars DataFrame (rooms as UInt64, whole)."""
    import polars as pl

    with guarded(db) as con:
        rel, _ = _relation(con, sql)
        return pl.DataFrame() if rel is None else rel.pl()


def query_rows(sql: str, db: Db = None) -> tuple[list[str], list[tuple]]:
    """Column names and rows (tuples) of one read-only query."""
    cols, rows, _ = preview(sql, db, None)
    return cols, rows


def preview(
    sql: str, db: Db = None, limit: int | None = TABLE_ROWS
) -> tuple[list[str], list[tuple], int]:
    """Column names, the first `limit` rows (all with None), and how many rows there are.

    A terminal shows a few dozen rows usefully; fetching and drawing 14 000 took 37 s.
    The total is counted only when there are more rows than shown."""
    if limit is not None and limit < 0:
        raise ForensicsError("--limit must be ≥ 0")
    with guarded(db) as con:
        rel, kind = _relation(con, sql)
        if rel is None:
            return [], [], 0
        if limit is None or kind != "SELECT":
            rows = rel.fetchall()
            return list(rel.columns), rows, len(rows)
        rows = rel.limit(limit + 1).fetchall()
        if len(rows) <= limit:
            return list(rel.columns), rows, len(rows)
        total = con.sql(f"SELECT count(*) FROM ({sql}) AS q").fetchall()[0][0]
        return list(rel.columns), rows[:limit], total


# Cells CSV (through polars) takes as they are; every other type is written as text.
_CSV_CELLS = re.compile(
    r"^(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT"
    r"|FLOAT|DOUBLE|DECIMAL\(\d+,\s*\d+\)|DATE|TIME|TIMESTAMP|TIMESTAMP WITH TIME ZONE"
    r"|TIMESTAMP_NS|TIMESTAMP_MS|TIMESTAMP_S|VARCHAR|JSON|UUID)$"
)


def _flat(rel: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Nested and variant columns (lists, maps, structs, unions, VARIANT) as JSON text,
    blobs as hex, anything else CSV has no cell for (intervals, bits, …) as DuckDB's
    text: CSV has only flat cells."""
    exprs = []
    for name, dtype in zip(rel.columns, rel.types, strict=True):
        t = str(dtype).upper()
        q = '"' + name.replace('"', '""') + '"'
        if _CSV_CELLS.match(t):
            exprs.append(q)
        elif t.endswith("]") or t.startswith(("MAP", "STRUCT", "UNION", "VARIANT")):
            exprs.append(f"to_json({q})::VARCHAR AS {q}")
        elif t == "BLOB":
            exprs.append(f"hex({q}) AS {q}")
        else:
            exprs.append(f"{q}::VARCHAR AS {q}")
    return rel.project(", ".join(exprs))


def export(
    sql: str, fmt: str, out: str | os.PathLike | None, db: Db = None, limit: int | None = None
) -> str | None:
    """Write the result as csv/json/parquet to `out` (or return csv/json text when out is
    None); `limit`: the first rows only."""
    if fmt not in OUTPUT_FORMATS or fmt == "table":
        raise ForensicsError(
            f"unknown output format {fmt!r}; use one of {', '.join(OUTPUT_FORMATS)}"
        )
    if fmt == "parquet" and out is None:
        raise ForensicsError("--format parquet needs --out FILE")
    with guarded(db) as con:
        rel, _ = _relation(con, sql)
        if rel is None:
            raise ForensicsError("the statement returned no rows to export")
        if limit is not None:
            if limit < 0:
                raise ForensicsError("--limit must be ≥ 0")
            rel = rel.limit(limit)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            table = rel.arrow()
            table = table.read_all() if hasattr(table, "read_all") else table
            with replacing(out) as tmp:  # type: ignore[arg-type]
                pq.write_table(table, tmp)
            return None
        if fmt == "csv":
            text = _flat(rel).pl().write_csv()
        else:
            cols = rel.columns
            data = [dict(zip(cols, r, strict=True)) for r in rel.fetchall()]
            text = orjson.dumps(json_safe(data), default=str, option=orjson.OPT_INDENT_2).decode()
            text += "\n"
        if out is None:
            return text
        write_text(out, text)
        return None
