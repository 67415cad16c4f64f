"""Which rank stopped first: the Flight Recorder dumps' entries (`collectives` rows of the
`flight_recorder_entry` pattern, one dump a rank). As torch's fr_trace reads them, the
ranks of a process group record the same collectives in the same order; a rank whose
last recorded collective is behind the others' never enqueued the next one — it stopped
first, and the others waited on it until their watchdog timed out."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..scope import Db, Runs, Scope, scoped

PATTERN = "flight_recorder_entry"
GROUPS = "flight_recorder_group"


@dataclass
class Stopped:
    pg: int  # the process group
    rank: int  # the rank behind the others
    seq: int  # its last collective's sequence id
    op: str | None  # that collective
    state: str | None  # how far it got (scheduled, started, completed)
    others: int  # the highest sequence id another rank reached
    ranks: int  # ranks of the group with a dump
    behind: int  # ranks whose last collective is this one (1: this rank alone)

    def sentence(self) -> str:
        who = (f"rank {self.rank} stopped first" if self.behind == 1 else
               f"rank {self.rank} is one of {self.behind} ranks that stopped first")  # fmt: skip
        return (f"flight recorder: {who} in process group {self.pg}: its last collective "
                f"is seq {self.seq} ({self.op or '?'}, {self.state or '?'}); the furthest of "
                f"the {self.ranks} ranks dumped reached seq {self.others}")  # fmt: skip


@dataclass
class Flight:
    stopped: list[Stopped]
    dumps: int  # ranks with a dump, over every group
    # ranks some group's members list (torch 2.10's pg_config) that no dump came from
    missing_ranks: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"stopped": [asdict(x) for x in self.stopped], "dumps": self.dumps,
                "missing_ranks": self.missing_ranks}  # fmt: skip

    def sentences(self) -> list[str]:
        out = [x.sentence() for x in self.stopped]
        if self.missing_ranks:
            ranks = ", ".join(map(str, self.missing_ranks))
            which = "rank" if len(self.missing_ranks) == 1 else "ranks"
            out.insert(0, f"flight recorder: {which} {ranks} of the process groups the dumps "
                          f"list left no dump (fr_trace's missing ranks): a rank that wrote "
                          f"none may have died or hung before its watchdog fired; look at "
                          f"its host first")  # fmt: skip
        return out


def flight(db: Db = None, run: Runs = None) -> Flight:
    with scoped(db, run) as s:
        return s.memo(("flight", tuple(s.runs)), lambda: _flight(s))


def _flight(s: Scope) -> Flight:
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""WITH last AS (
                SELECT pg, rank, max(seq) AS seq, arg_max(op, seq) AS op,
                       arg_max(state, seq) AS state
                FROM collectives
                WHERE {where} AND pattern = '{PATTERN}' AND rank IS NOT NULL
                  AND seq IS NOT NULL
                GROUP BY ALL
            )
            SELECT pg, rank, seq, op, state,
                   max(seq) OVER (PARTITION BY pg) AS top,
                   count(*) OVER (PARTITION BY pg) AS ranks,
                   min(seq) OVER (PARTITION BY pg) AS low,
                   count(*) OVER (PARTITION BY pg, seq) AS tied
            FROM last ORDER BY pg, rank""",
        params,
    ).fetchall()
    stopped = [Stopped(pg, rank, seq, op, state, top, ranks, tied)
               for pg, rank, seq, op, state, top, ranks, low, tied in rows
               if ranks > 1 and seq == low and low < top]  # fmt: skip
    return Flight(stopped, len({(r[0], r[1]) for r in rows}), _missing(s))


def _missing(s: Scope) -> list[int]:
    """The ranks a dump's group lists (`flight_recorder_group` rows) with no dump."""
    where, params = s.where_followed()
    (listed, dumped), *_ = s.con.execute(
        f"""SELECT list_distinct(flatten(list(string_split(ranks, ',')) FILTER
                                         (WHERE pattern = '{GROUPS}' AND ranks IS NOT NULL))),
                   list_distinct(list(rank) FILTER (WHERE rank IS NOT NULL))
            FROM collectives
            WHERE {where} AND pattern IN ('{PATTERN}', '{GROUPS}')""",
        params,
    ).fetchall()
    have = set(dumped or [])
    return sorted({int(r) for r in listed or [] if r.lstrip("-").isdigit()} - have)
