"""Which runs an analysis looks at: the scope (forensics/scope.py) checks them once a
command; these are its helpers, importable where analyses always found them. And the
runs listed with what each holds (`forensics runs`)."""

from __future__ import annotations

import os

from ..scope import Runs, all_runs, run_filter, scoped
from ..statuses import UNJUDGED_SQL

__all__ = ["Runs", "all_runs", "list_runs", "run_filter"]


def list_runs(db: str | os.PathLike | None = None) -> list[dict]:
    """Every run, oldest first: its tags, sources, judged requests and corrupted ones."""
    with scoped(db) as s:
        rows = s.con.execute(
            f"""SELECT r.run, r.created::VARCHAR,
                       (SELECT count(*) FROM sources WHERE run = r.run),
                       (SELECT count(*) FILTER (WHERE NOT {UNJUDGED_SQL}) FROM results
                        WHERE run = r.run),
                       (SELECT count(*) FILTER (WHERE corrupted AND NOT {UNJUDGED_SQL})
                        FROM results WHERE run = r.run)
                FROM runs r ORDER BY r.created, r.rowid"""
        ).fetchall()
        return [{"run": r, "tags": s.tags.get(r, {}), "created": c, "sources": n,
                 "judged": j, "corrupted": k} for r, c, n, j, k in rows]  # fmt: skip
