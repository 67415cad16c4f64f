"""The headline in Datadog Watchdog's shape: what changed first (the top suspect, or the
configuration difference between runs it is), the first corrupted request after it, and
the impact (corrupted requests and sessions, their share).

Times are the harness's send times (the client's clock): the request that first had the
suspect, and the first corrupted one from then on."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from ...timefmt import iso_us
from .features import Table
from .rank import Suspect


@dataclass
class Headline:
    changed: str | None  # the top suspect's predicate (a runs' difference: says so)
    first_us: int | None  # the first request with it, sent (µs since the epoch)
    first_run: str | None
    first_corrupted: dict | None  # rid, session, run, sent_us: the first corrupted from then
    requests: int
    corrupted: int
    sessions: int
    sessions_corrupted: int

    def as_dict(self) -> dict:
        return {"changed": self.changed, "first_us": self.first_us, "first_run": self.first_run,
                "first_corrupted": self.first_corrupted, "requests": self.requests,
                "corrupted": self.corrupted, "sessions": self.sessions,
                "sessions_corrupted": self.sessions_corrupted}  # fmt: skip

    def sentence(self) -> str:
        share = self.corrupted / self.requests if self.requests else 0.0
        impact = (f"impact: {self.corrupted:,} of {self.requests:,} judged requests "
                  f"corrupted ({share:.1%}), in {self.sessions_corrupted:,} of "
                  f"{self.sessions:,} sessions")  # fmt: skip
        if self.changed is None:
            return f"headline: no factor stands out; {impact}"
        first = ""
        if self.first_us is not None:
            first = f", first with the request sent at {iso_us(self.first_us)} ({self.first_run})"
        after = ""
        if (c := self.first_corrupted) is not None:
            at = f", sent {iso_us(c['sent_us'])}" if c["sent_us"] is not None else ""
            after = (f"; the first corrupted request after it: {c['rid']} "
                     f"(session {c['session']}{at})")  # fmt: skip
        return f"headline: what changed first — {self.changed}{first}{after}; {impact}"


def headline(table: Table, rows: dict[str, np.ndarray], top: Suspect | None) -> Headline:
    """The headline of `table`'s judged requests (`rows`: request_rows' of them) with `top`
    (the first suspect, or None)."""
    y = table.corrupted
    sessions = {(r, s) for r, s in zip(rows["run"], rows["session"], strict=True)}
    bad = {(r, s) for r, s, c in zip(rows["run"], rows["session"], y, strict=True) if c}
    h = Headline(None, None, None, None, len(table), int(y.sum()), len(sessions), len(bad))
    if top is None or top.exposed is None:
        return h
    h.changed = top.predicate
    if top.units == "runs":
        h.changed += f" (runs {', '.join(top.runs_with)} against {', '.join(top.runs_without)})"
    sent = rows["sent_us"]
    with_it = np.flatnonzero(top.exposed & ~np.isnan(sent))
    if not len(with_it):
        return h
    first = with_it[np.argmin(sent[with_it])]
    h.first_us, h.first_run = int(sent[first]), str(rows["run"][first])
    later = with_it[y[with_it] & (sent[with_it] >= sent[first])]
    if len(later):
        i = later[np.argmin(sent[later])]
        h.first_corrupted = {"rid": str(rows["rid"][i]), "session": str(rows["session"][i]),
                             "run": str(rows["run"][i]), "sent_us": int(sent[i])}  # fmt: skip
    return h


def request_rows(con: duckdb.DuckDBPyConnection, table: Table) -> dict[str, np.ndarray]:
    """Each row's run, session, rid and send time, in the table's order (by its keys)."""
    n = len(table)
    if table.keys is None:
        empty = np.full(n, None, dtype=object)
        return {"run": table.run, "session": empty, "rid": empty,
                "sent_us": np.full(n, np.nan)}  # fmt: skip
    with table.keyed(con, "_headline_keys"):
        got = con.execute(
            """SELECT k.i, r.run, r.session, r.rid, r.start_us FROM _headline_keys k
               LEFT JOIN results r ON r.source_id = k.source_id AND r.line = k.line
               QUALIFY row_number() OVER (PARTITION BY k.i) = 1 ORDER BY k.i"""
        ).fetchall()
    run, session, rid, sent = zip(*[g[1:] for g in got], strict=True) if got else ([],) * 4
    sent_us = np.array([np.nan if s is None else s for s in sent], dtype=float)
    return {"run": np.array(run, dtype=object), "session": np.array(session, dtype=object),
            "rid": np.array(rid, dtype=object), "sent_us": sent_us}  # fmt: skip
