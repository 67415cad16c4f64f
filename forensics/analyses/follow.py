"""`forensics follow RID|ROOM`: every line about one request or room, on every host, in
time order — what an lnav user does by hand with a search per host.

A rid brings in the rooms its lines and the harness give it, a room the rids; a line is
about the request when its message holds one of those. Times are put on one clock: the
prefill hosts' lines are shifted by the midpoint of `skew`'s bounds where both bounds
exist (decode is the reference); the shifts, or why there are none, are stated.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import ForensicsError
from ..scope import Db, Runs, Scope, scoped
from .skew import skew

MAX_LINES = 5_000  # a room's lines are a few dozen; more means the key is too common


@dataclass
class FollowLine:
    ts_us: int | None  # on the reference clock (shifted where stated)
    raw_ts_us: int | None  # as the host logged it
    host: str | None
    run: str
    source_id: int
    entry_no: int
    message: str


@dataclass
class Follow:
    key: str
    rids: list[str]
    rooms: list[int]
    shifts_us: dict[str, int]  # host -> µs added to its times
    clock: str  # one sentence: which clock the times are on
    lines: list[FollowLine] = field(default_factory=list)
    harness: list[dict] = field(default_factory=list)  # the harness's rows for the rids
    truncated: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


def follow(db: Db, key: str, run: Runs = None) -> Follow:
    key = key.strip()
    if len(key) < 4:
        raise ForensicsError(f"follow takes a rid or a room, got {key!r}: too short to search")
    with scoped(db, run) as s:
        con = s.con
        where, params = s.where()
        rids, rooms = _linked(con, key, where, params)
        if not rids and not rooms:
            raise ForensicsError(f"no rid or room {key!r} in the database")
        shifts, clock = _shifts(s)
        needles = [*rids, *map(str, rooms)]
        like = " OR ".join("contains(e.message, ?)" for _ in needles)
        swhere, sparams = s.where("s.run")
        rows = con.execute(
            f"""SELECT e.ts_us, e.host, s.run, e.source_id, e.entry_no, e.message
                FROM entries e JOIN sources s USING (source_id)
                WHERE {swhere} AND ({like})
                ORDER BY e.ts_us NULLS LAST, e.host, e.source_id, e.entry_no
                LIMIT {MAX_LINES + 1}""",
            [*sparams, *needles],
        ).fetchall()
        lines = [
            FollowLine(
                ts + shifts.get(h or "", 0) if ts is not None else None, ts, h, r, sid, no, m
            )
            for ts, h, r, sid, no, m in rows[:MAX_LINES]
        ]
        lines.sort(key=lambda ln: (ln.ts_us is None, ln.ts_us or 0, ln.host or "", ln.entry_no))
        cols = ["run", "session", "round", "rid", "room", "status", "corrupted", "reason",
                "start_us", "end_us"]  # fmt: skip
        harness = [
            dict(zip(cols, r, strict=True))
            for r in con.execute(
                f"""SELECT {", ".join(cols)} FROM results WHERE {where}
                    AND (rid IN (SELECT unnest(?::VARCHAR[]))
                         OR room IN (SELECT unnest(?::UBIGINT[])))
                    ORDER BY start_us""",
                [*params, rids, rooms],
            ).fetchall()
        ]
        return Follow(key, rids, rooms, shifts, clock, lines, harness, len(rows) > MAX_LINES)


def _linked(con, key: str, where: str, params: list) -> tuple[list[str], list[int]]:
    """The rids and rooms the key names, each side's tables linking one to the other."""
    room = int(key) if key.isdigit() and int(key) < 1 << 64 else None
    links = f"""
        SELECT rid, room FROM rid_rooms WHERE {where}
        UNION SELECT rid, room FROM req_stats WHERE {where}
        UNION SELECT rid, room FROM results WHERE {where}
        UNION SELECT rid, room FROM transfers WHERE {where}
        UNION SELECT rid, room FROM checksums WHERE {where}"""
    rows = con.execute(
        f"SELECT DISTINCT rid, room FROM ({links}) WHERE rid = ? OR room = ?",
        [*params * 5, key, room],
    ).fetchall()
    rids = sorted({r for r, _ in rows if r} | ({key} if room is None else set()))
    rooms = sorted({m for _, m in rows if m is not None} | ({room} if room is not None else set()))
    if room is None and not rows:
        # a rid no table links: it still counts if a line holds it
        found = con.execute(
            "SELECT count(*) FROM (SELECT 1 FROM entries WHERE contains(message, ?) LIMIT 1)",
            [key],
        ).fetchall()[0][0]
        rids = [key] if found else []
    return rids, rooms


def _shifts(s: Scope) -> tuple[dict[str, int], str]:
    pairs = skew(s).pairs
    shifts: dict[str, int] = {}
    unshifted = []
    for p in pairs:
        if p.src_host is None:
            continue
        if p.upper_us is not None and p.lower_us is not None and p.consistent:
            shifts[p.src_host] = (p.upper_us + p.lower_us) // 2
        else:
            unshifted.append(p.src_host)
    if shifts:
        said = ", ".join(f"{h} by {v / 1000:+.1f} ms" for h, v in sorted(shifts.items()))
        clock = f"decode's clock: {said} (the midpoint of skew's bounds)"
    else:
        clock = "each host's own clock: no host pair has both skew bounds"
    if unshifted:
        clock += f"; left as logged: {', '.join(sorted(set(unshifted)))} (one-sided bounds)"
    return shifts, clock
