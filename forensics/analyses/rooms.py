"""Which rooms went wrong and how: verdict counts and the worst rooms first."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ForensicsError
from ..plural import counted
from ..scope import Db, Runs, scoped
from ..statuses import SEVERITY

COLUMNS = ["run", "verdict", "room", "rid", "buf", "layer", "tp", "src_host", "dst_host",
           "src_ts_us", "dst_ts_us", "stale_of", "transfer_events", "transfer_reasons",
           "source"]  # fmt: skip


@dataclass
class RoomsReport:
    counts: dict[str, dict[str, int]]  # run -> verdict -> rows
    worst: list[dict]  # rows of `rooms`, worst verdict first, then by time
    followed: list[str] = field(default_factory=list)  # runs added for their evidence
    # run -> (rooms received more than once, of them conflicting): `rooms`' dst_count
    received_twice: dict[str, tuple[int, int]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        twice = {r: {"rooms": n, "conflicting": c} for r, (n, c) in self.received_twice.items()}
        return {"counts": self.counts, "worst": self.worst, "followed": self.followed,
                "received_more_than_once": twice}  # fmt: skip

    def received_sentences(self) -> list[str]:
        """How many rooms decode recorded more than once: identical records judge as
        one, disagreeing ones are a conflict — either way a room received twice."""
        out = []
        for run, (n, bad) in self.received_twice.items():
            alike = n - bad
            how = "; ".join(x for x in (
                f"{alike:,} with identical records, judged as one" if alike else "",
                f"{bad:,} whose records disagree, a conflict" if bad else "") if x)  # fmt: skip
            was = "was" if n == 1 else "were"
            out.append(f"{run}: {counted(n, 'room')} {was} received more than once ({how})")
        return out

    def sentences(self) -> list[str]:
        out = list(self.followed)
        for run, counts in self.counts.items():
            total = sum(counts.values())
            bad = {v: n for v, n in counts.items() if v != "match"}
            what = ", ".join(f"{n} {v}" for v, n in bad.items()) or "none bad"
            out.append(f"{run}: {counted(total, 'room')}, {counts.get('match', 0)} match; {what}")
        out += self.received_sentences()
        return out if self.counts else [*out, "no checksum records: no room can be judged"]


def rooms(
    db: Db = None,
    run: Runs = None,
    verdict: str | None = None,
    limit: int = 20,
) -> RoomsReport:
    if verdict is not None and verdict not in SEVERITY:
        raise ForensicsError(f"unknown verdict {verdict!r}; known: {', '.join(SEVERITY)}")
    with scoped(db, run) as s:
        con, followed = s.con, s.follow_notes
        where, params = s.where_followed()
        counts: dict[str, dict[str, int]] = {}
        for r, v, n in con.execute(
            f"SELECT run, verdict, count(*) FROM rooms WHERE {where} GROUP BY ALL", params
        ).fetchall():
            counts.setdefault(r, {})[v] = n
        counts = {r: {v: c[v] for v in SEVERITY if v in c} for r, c in sorted(counts.items())}
        order = (
            "CASE verdict "
            + " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(SEVERITY))
            + " END"
        )
        pick = "verdict = ?" if verdict is not None else "verdict <> 'match'"
        rel = con.execute(
            f"""SELECT {", ".join(COLUMNS)} FROM rooms WHERE {where} AND {pick}
                ORDER BY {order}, coalesce(dst_ts_us, src_ts_us), room LIMIT ?""",
            [*params, *([verdict] if verdict is not None else []), limit],
        )
        worst = [dict(zip(COLUMNS, row, strict=True)) for row in rel.fetchall()]
        twice = {r: (n, c) for r, n, c in con.execute(
            f"""SELECT run, count(DISTINCT room), count(DISTINCT room) FILTER (verdict = 'conflict')
                FROM rooms WHERE {where} AND dst_count > 1 GROUP BY run ORDER BY run""",
            params).fetchall()}  # fmt: skip
        return RoomsReport(counts, worst, followed, twice)
