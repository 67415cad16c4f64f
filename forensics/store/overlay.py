"""A connection's tables seen through a change: each stored table's view wrapped by
another (a time window, scrubbed text), the named views recomputed from their SQL over
them, so that every analysis, the dashboard and the trace see the changed rows.

Only this connection sees it (temporary views); the catalog and the shards are untouched.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import duckdb

from ..errors import ForensicsError
from ..parsers.isotime import iso_us
from ..queries import all_queries

# (table, [(column, type), ...]) -> (SELECT list, WHERE condition) for its new view
Wrap = Callable[[str, list[tuple[str, str]]], tuple[str, str]]
_CREATE = re.compile(r"(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?TEMP(?:ORARY)?\s+VIEW\s+\S+\s+AS\s+")


def overlay(
    con: duckdb.DuckDBPyConnection,
    wrap: Wrap,
    stored: Callable[[str, str], str | None] | None = None,
) -> None:
    """Every stored table's temporary view replaced by `wrap`'s view of it; the named
    views recomputed from their SQL over them (never their rows stored for the unchanged
    data) — unless `stored` (the view's name, its stored rows' table) gives a body over
    those rows (a change that commutes with the view, such as scrubbing its text)."""
    named = {q.name for q in all_queries()}
    views = con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE temporary AND NOT internal"
    ).fetchall()
    for name, body in views:
        if name in named or name.startswith("fx_"):
            continue
        raw = f"fx_{len(views)}_{name}"  # a fresh name: overlays may stack
        while con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = ?", [raw]
        ).fetchall()[0][0]:
            raw += "_"
        con.execute(f"CREATE TEMP VIEW {raw} AS {_CREATE.sub('', body.strip().rstrip(';'))}")
        cols = [(c, t) for c, t, *_ in con.execute(f"DESCRIBE {raw}").fetchall()]
        select, where = wrap(name, cols)
        where = where.replace("{raw}", raw)  # a condition over the table's own rows
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT {select} FROM {raw} "
                    f"WHERE {where}")  # fmt: skip
    bodies = dict(views)
    for q in all_queries():  # dependencies first
        body = q.sql
        if stored is not None:
            table = _stored_rows(bodies.get(q.name, ""))
            body = (stored(q.name, table) if table else None) or body
        con.execute(f"CREATE OR REPLACE TEMP VIEW {q.name} AS {body}")


_STORED = re.compile(r"(?is)\bSELECT\s+\*\s+FROM\s+(main\.derived_\w+)\s*;?\s*$")


def _stored_rows(body: str) -> str | None:
    """The stored rows' table a named view reads (derived.py), or None (its SQL)."""
    m = _STORED.search(_CREATE.sub("", body.strip()))
    return m.group(1) if m else None


def parse_time(text: str, flag: str) -> int:
    """µs since the epoch of ISO 8601 (no zone: UTC) or of epoch seconds."""
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        pass
    try:
        return iso_us(text.replace(" ", "T", 1) if " " in text.strip() else text)
    except ValueError:
        raise ForensicsError(
            f"{flag} {text!r}: not a time (ISO 8601 such as 2026-11-29T07:00:00Z, or epoch seconds)"
        ) from None


# where a table's time is: entries and records by their entry's time, results by when
# the request was sent; quarantined lines by the entry before them (_QUARANTINED)
_TIME = {"results": "start_us"}
_LINES = "fx_window_lines"
_QUARANTINED = f"""(source_id, coalesce(entry_no, -1), coalesce(line, -1)) IN (
    SELECT q.source_id, coalesce(q.entry_no, -1), coalesce(q.line, -1)
    FROM {{raw}} q ASOF JOIN {_LINES} e
      ON q.source_id = e.source_id AND coalesce(q.line, 0) >= e.line_first
    WHERE q.entry_no IS NULL AND {{cond}}
    UNION ALL
    SELECT q.source_id, q.entry_no, coalesce(q.line, -1)
    FROM {{raw}} q JOIN {_LINES} e USING (source_id, entry_no) WHERE {{cond}})"""


def window(con: duckdb.DuckDBPyConnection, since_us: int | None, until_us: int | None) -> None:
    """Only what happened in [since, until): rows without a time are left out too."""
    if since_us is None and until_us is None:
        return
    if since_us is not None and until_us is not None and until_us <= since_us:
        raise ForensicsError("--until must be after --since")

    def within(col: str) -> str:
        conds = [f"{col} IS NOT NULL"]
        if since_us is not None:
            conds.append(f"{col} >= {int(since_us)}")
        if until_us is not None:
            conds.append(f"{col} < {int(until_us)}")
        return " AND ".join(conds)

    def wrap(name: str, cols: list[tuple[str, str]]) -> tuple[str, str]:
        if name == "quarantine":
            return "*", _QUARANTINED.replace("{cond}", within("e.ts_us"))
        col = _TIME.get(name, "ts_us")
        if col not in {c for c, _ in cols}:
            return "*", "TRUE"
        return "*", within(col)

    # every entry's time and lines, outside the window too: a quarantined line belongs
    # where the entry before it does
    con.execute(f"""CREATE OR REPLACE TEMP VIEW {_LINES} AS
                    SELECT source_id, entry_no, line_first, ts_us
                    FROM ({_view_body(con, "entries")})""")
    overlay(con, wrap)


def _view_body(con: duckdb.DuckDBPyConnection, name: str) -> str:
    """A temporary view's own SELECT: what it means now, whatever its name is made to
    mean later (the views it reads by their fx_ names are never replaced)."""
    body = con.execute(
        """SELECT sql FROM duckdb_views() WHERE view_name = ? AND NOT internal
           ORDER BY temporary DESC LIMIT 1""",
        [name],
    ).fetchall()[0][0]
    return _CREATE.sub("", body.strip().rstrip(";"))
