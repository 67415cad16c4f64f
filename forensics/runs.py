"""Which runs an analysis looks at: one named run, or all of them."""

from __future__ import annotations

import duckdb

from .errors import ForensicsError


def all_runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, dict]]:
    """(run, tags) of every run, oldest first."""
    rows = con.execute("SELECT run, tags FROM runs ORDER BY created, run").fetchall()
    return [(r, dict(t or {})) for r, t in rows]


def selected_runs(con: duckdb.DuckDBPyConnection, run: str | None) -> list[str]:
    """The named run (checked to exist) or every run."""
    known = [r for r, _ in all_runs(con)]
    if run is None:
        return known
    if run not in known:
        raise ForensicsError(f"no run named {run!r}; known: {', '.join(known) or 'none'}")
    return [run]


def run_filter(run: str | None, column: str = "run") -> tuple[str, list]:
    """A WHERE clause and its parameters selecting one run (or all)."""
    return (f"{column} = ?", [run]) if run is not None else ("TRUE", [])
