"""What an ingest brought in: entries per host/unit, time span, quarantine reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    trace_hosts: list[str] = field(default_factory=list)  # spans' hosts no other entry has

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
            "unmatched_trace_hosts": self.trace_hosts,
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
    return Summary(
        per, q, n, nq, min(firsts, default=None), max(lasts, default=None), _trace_hosts(con, where)
    )


def _trace_hosts(con: duckdb.DuckDBPyConnection, where: str) -> list[str]:
    """The hosts of these sources' spans that no entry of any other kind names: a trace's
    host.name that is not the journal's name for the machine. (Asked only where these
    sources hold a trace: the question scans every entry's host.)"""
    if not scalar(con, f"SELECT count(*) FROM sources WHERE {where} AND format LIKE 'otlp-%'"):
        return []
    return [r[0] for r in con.execute(
        f"""SELECT DISTINCT host FROM spans WHERE {where} AND host IS NOT NULL
            AND host NOT IN (SELECT DISTINCT e.host FROM entries e JOIN sources s USING (source_id)
                             WHERE e.host IS NOT NULL AND s.format NOT LIKE 'otlp-%')
            ORDER BY host"""
    ).fetchall()]  # fmt: skip
