"""Which runs an analysis looks at: one named run, or all of them."""

from __future__ import annotations

import duckdb

from ..errors import ForensicsError


def all_runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, dict]]:
    """(run, tags) of every run, oldest first; runs made by one ingest (a sweep's levels)
    in the order it made them."""
    rows = con.execute("SELECT run, tags FROM runs ORDER BY created, rowid").fetchall()
    return [(r, dict(t or {})) for r, t in rows]


Runs = str | list[str] | None  # one run, several, or (None / empty) all of them


def _as_list(run: Runs) -> list[str]:
    return [run] if isinstance(run, str) else list(run or [])


def selected_runs(con: duckdb.DuckDBPyConnection, run: Runs) -> list[str]:
    """The named runs (checked to exist) or every run."""
    known = [r for r, _ in all_runs(con)]
    chosen = _as_list(run)
    for r in chosen:
        if r not in known:
            raise ForensicsError(f"no run named {r!r}; known: {', '.join(known) or 'none'}")
    return chosen or known


def run_filter(run: Runs, column: str = "run") -> tuple[str, list]:
    """A WHERE clause and its parameters selecting the runs (or all)."""
    chosen = _as_list(run)
    if not chosen:
        return "TRUE", []
    return f"{column} IN ({', '.join('?' * len(chosen))})", chosen


def with_evidence_runs(con: duckdb.DuckDBPyConnection, run: Runs) -> tuple[Runs, list[str]]:
    """The named runs and the runs their results' evidence is in (`result_links`: a run
    of results whose records another run holds, as the README's repro recipe makes), and
    a sentence for each run so followed; all runs stay all runs."""
    chosen = _as_list(run)
    if not chosen:
        return run, []
    marks = ", ".join("?" * len(chosen))
    links = con.execute(
        f"""SELECT DISTINCT run, evidence_run FROM result_links
            WHERE run IN ({marks}) AND evidence_run IS NOT NULL AND evidence_run <> run
            ORDER BY 1, 2""",
        chosen,
    ).fetchall()
    extra = [e for _, e in links if e not in chosen]
    said = [f"run {r}'s results have their evidence in run {e}: it is included" for r, e in links]
    return chosen + list(dict.fromkeys(extra)), said
