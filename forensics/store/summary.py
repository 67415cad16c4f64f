"""What an ingest brought in: entries per host/unit, time span, quarantine reasons."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from .database import scalar


@dataclass
class Summary:
    per_stream: list[tuple[str | None, str | None, int, int | None, int | None]]
    quarantine: list[tuple[str, int]]
    entries: int
    quarantined: int
    first_ts_us: int | None
    last_ts_us: int | None

    def as_dict(self) -> dict:
        return {
            "entries": self.entries,
            "quarantined": self.quarantined,
            "first_ts_us": self.first_ts_us,
            "last_ts_us": self.last_ts_us,
            "per_stream": [
                {"host": h, "unit": u, "entries": n, "first_ts_us": a, "last_ts_us": b}
                for h, u, n, a, b in self.per_stream
            ],
            "quarantine_reasons": [{"reason": r, "lines": n} for r, n in self.quarantine],
        }


def summarize(con: duckdb.DuckDBPyConnection, source_ids: list[int] | None = None) -> Summary:
    """Summary of the given sources (all when None)."""
    where = (
        "TRUE"
        if source_ids is None
        else f"source_id IN ({','.join(map(str, source_ids)) or 'NULL'})"
    )
    per = con.execute(
        f"""SELECT host, coalesce(unit, ident) AS unit, count(*), min(ts_us), max(ts_us)
            FROM entries WHERE {where} GROUP BY ALL ORDER BY host NULLS LAST, unit NULLS LAST"""
    ).fetchall()
    q = con.execute(
        f"""SELECT reason, count(*) FROM quarantine WHERE {where}
            GROUP BY reason ORDER BY count(*) DESC, reason LIMIT 5"""
    ).fetchall()
    nq = scalar(con, f"SELECT count(*) FROM quarantine WHERE {where}")
    n = sum(r[2] for r in per)
    firsts = [r[3] for r in per if r[3] is not None]
    lasts = [r[4] for r in per if r[4] is not None]
    return Summary(per, q, n, nq, min(firsts, default=None), max(lasts, default=None))
