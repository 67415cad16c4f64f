"""The sources: listed (newest last), removed, or relabelled with another host or run.

A source is the unit of an ingest: every stored table that holds its rows says so by a
`source_id` column (parsers/tables.py), so removing or relabelling one touches exactly
its rows, in one transaction, and the stored rows of the named views are recomputed.
"""

from __future__ import annotations

import os

import duckdb

from ..errors import ForensicsError
from ..parsers.tables import TABLES
from .database import connect, connect_read_only, first_row, transaction
from .derived import STAMP, refresh_derived


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


def _holding(column: str) -> list[str]:
    """The tables whose rows name their source and carry `column`."""
    return [t.name for t in TABLES.values()
            if "source_id" in t.names and column in t.names and t.name != "sources"]  # fmt: skip


def _source(con: duckdb.DuckDBPyConnection, source_id: int) -> tuple[str, str]:
    row = first_row(con, "SELECT run, path FROM sources WHERE source_id = ?", [source_id])
    if row is None:
        known = con.execute("SELECT source_id FROM sources ORDER BY 1").fetchall()
        ids = ", ".join(str(r[0]) for r in known) or "none"
        raise ForensicsError(f"no source {source_id}; known: {ids}")
    return row


def _changed(con: duckdb.DuckDBPyConnection) -> None:
    """Rows moved under the views: their stored rows are recomputed (the data's
    fingerprint does not see a host change, so every stamp goes)."""
    con.execute(f"DELETE FROM meta WHERE key LIKE '{STAMP}%'")
    con.execute(
        "DELETE FROM runs WHERE run NOT IN (SELECT run FROM sources) "
        "AND run NOT IN (SELECT run FROM results)"
    )  # a results file's header runs
    refresh_derived(con)


def remove_source(db: str | os.PathLike | None, source_id: int) -> dict:
    """Every row of one source, gone. Refused when a later source dropped entries as
    duplicates: they may be copies of this one's, and would be lost with it."""
    con = connect(db)
    try:
        run, path = _source(con, source_id)
        later = con.execute(
            "SELECT source_id, duplicates FROM sources WHERE source_id > ? AND duplicates > 0"
            " ORDER BY source_id",
            [source_id],
        ).fetchall()
        if later:
            ids = ", ".join(f"{s} ({n:,})" for s, n in later)
            raise ForensicsError(
                f"source {source_id} cannot be removed: later sources dropped entries as "
                f"duplicates of stored ones, perhaps of its own ({ids}); remove those first"
            )
        removed = {}
        with transaction(con):
            for table in _holding("source_id"):
                n = con.execute(f"DELETE FROM {table} WHERE source_id = ?", [source_id])
                removed[table] = n.fetchall()[0][0]
            con.execute("DELETE FROM sources WHERE source_id = ?", [source_id])
            _changed(con)
        return {"source_id": source_id, "run": run, "path": path,
                "removed": {t: n for t, n in removed.items() if n}}  # fmt: skip
    finally:
        con.close()


def relabel_source(
    db: str | os.PathLike | None,
    source_id: int,
    host: str | None = None,
    run: str | None = None,
) -> dict:
    """Give one source's rows another host (entries and records) and/or run."""
    if host is None and run is None:
        raise ForensicsError("relabel needs --host or --run")
    if any(v is not None and not v.strip() for v in (host, run)):
        raise ForensicsError("a host or run name cannot be empty")
    con = connect(db)
    try:
        old_run, path = _source(con, source_id)
        changed = {}
        with transaction(con):
            if host is not None:
                for table in _holding("host"):
                    n = con.execute(f"UPDATE {table} SET host = ? WHERE source_id = ?",
                                    [host, source_id])  # fmt: skip
                    changed[f"{table}.host"] = n.fetchall()[0][0]
            if run is not None:
                con.execute(
                    "INSERT INTO runs (run, tags) SELECT ?, NULL WHERE NOT EXISTS "
                    "(SELECT 1 FROM runs WHERE run = ?)",
                    [run, run],
                )
                for table in ["sources", *_holding("run")]:
                    n = con.execute(f"UPDATE {table} SET run = ? WHERE source_id = ?",
                                    [run, source_id])  # fmt: skip
                    changed[f"{table}.run"] = n.fetchall()[0][0]
            _changed(con)
        return {"source_id": source_id, "path": path, "run": run or old_run,
                "changed": {k: n for k, n in changed.items() if n}}  # fmt: skip
    finally:
        con.close()
