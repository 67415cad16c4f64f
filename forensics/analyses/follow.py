"""`forensics follow RID|ROOM`: every line about one request or room, on every host, in
time order — what an lnav user does by hand with a search per host.

A rid brings in the rooms its lines and the harness give it, a room the rids; a line is
about the request when its message holds one of those. Times are put on one clock: the
prefill hosts' lines are shifted by the midpoint of `skew`'s bounds where both bounds
exist (decode is the reference); the shifts, or why there are none, are stated.

What went wrong comes first: the room's verdict, the request's status. A decode step's
record lists every rid of its batch, so a room is named in hundreds of them: they are
folded to one line per host and run of steps (`all_lines` keeps each). `around` adds the
other events (aborts, retractions, errors, transfer failures) on the same hosts within
that many seconds of the request's lines: what `suspects` counted beside it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..errors import ForensicsError
from ..scope import Db, Runs, Scope, scoped
from .skew import skew

MAX_LINES = 5_000  # a room's lines are a few dozen; more means the key is too common
# a step record, with or without SGLang's prefix ([2026-09-20 14:03:12 DP0 TP1]): a
# plain log's records carry it (the demo's journal did not: only it folded)
STEP = re.compile(r"^(?:\[\d{4}-\d\d-\d\d[ T][^\]]{0,60}\]\s*)?forensics:step\b.*?\bstep=(\d+)")


@dataclass
class FollowLine:
    ts_us: int | None  # on the reference clock (shifted where stated)
    raw_ts_us: int | None  # as the host logged it
    host: str | None
    run: str
    source_id: int
    entry_no: int
    message: str
    # request | span (of the request's trace) | steps (folded records) | around (another
    # event) | first failure | echo
    about: str = "request"


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
    verdicts: list[dict] = field(default_factory=list)  # the rooms' rows of `rooms`
    folded: int = 0  # step records folded into ranges
    around_s: float | None = None
    summary: str | None = None  # a template's lines: what they say, in place of verdicts

    def headline(self) -> str:
        """What went wrong, before any line: each room's verdict, each request's status."""
        if self.summary:
            return self.summary
        said = [f"room {v['room']}: {v['verdict']}" + (f" (run {v['run']})" if v["run"] else "")
                for v in self.verdicts]  # fmt: skip
        for h in self.harness:
            state = h["status"] or ("corrupted" if h["corrupted"] else "ok")
            why = f" ({h['reason']})" if h["reason"] else ""
            said.append(f"request {h['rid']}: {state}{why}")
        return "; ".join(said) or "no verdict: no checksum record or harness result names it"

    def as_dict(self) -> dict:
        return asdict(self)


def follow(
    db: Db, key: str, run: Runs = None, all_lines: bool = False, around: float | None = None
) -> Follow:
    key = key.strip()
    if len(key) < 4:
        raise ForensicsError(f"follow takes a rid or a room, got {key!r}: too short to search")
    if around is not None and not 0 <= around <= 3600:
        raise ForensicsError(f"--around takes 0 to 3600 seconds, not {around:g}")
    with scoped(db, run) as s:
        where, params = s.where()
        rids, rooms = _linked(s.con, key, where, params)
        if not rids and not rooms:
            raise ForensicsError(f"no rid or room {key!r} in the database")
        shifts, clock = _shifts(s)
        lines, truncated = _lines(s, [*rids, *map(str, rooms)], shifts)
        lines = _merge(lines, _traced(s, rids, rooms, lines, shifts))
        f = Follow(key, rids, rooms, shifts, clock, lines, _harness(s, rids, rooms),
                   truncated, _verdicts(s, rooms), around_s=around)  # fmt: skip
        if around is not None and lines:
            f.lines = _merge(lines, _around(s, lines, shifts, around))
        if not all_lines:
            f.lines, f.folded = _fold(f.lines)
        return f


def follow_template(db: Db, template: int, run: Runs = None, around: float | None = None) -> Follow:
    """Every line of one template (`forensics templates` lists them) on every host in time
    order (skew applied), with the other events around them within `around` seconds."""
    with scoped(db, run) as s:
        where, params = s.where("l.run")
        rows = s.con.execute(
            f"""SELECT e.ts_us, e.host, l.run, e.source_id, e.entry_no, e.message, l.text
                FROM lines l JOIN entries e USING (source_id, entry_no)
                WHERE l.template = ? AND {where}
                ORDER BY e.ts_us NULLS LAST, e.host, e.source_id, e.entry_no
                LIMIT {MAX_LINES + 1}""",
            [template, *params],
        ).fetchall()
        if not rows:
            raise ForensicsError(f"no template {template:016x} in these runs")
        shifts, clock = _shifts(s)
        lines = [_line(*r[:6], shifts) for r in rows[:MAX_LINES]]
        text = next((r[6] for r in rows if r[6]), "(text not kept)")
        f = Follow(f"template {template:016x}", [], [], shifts, clock, lines,
                   truncated=len(rows) > MAX_LINES, around_s=around,
                   summary=f"template {template:016x}: {text} — {len(lines):,} lines")  # fmt: skip
        if around is not None:
            f.lines = _merge(lines, _around(s, lines, shifts, around))
        return f


def follow_cascade(db: Db, run: Runs = None, around: float | None = None) -> Follow:
    """The first failure (`report`'s) and every failure that echoes it, on every host in
    time order (skew applied): the first line is about "first failure", the rest "echo"."""
    from .cascades import first_cascade

    with scoped(db, run) as s:
        got = first_cascade(s)
        if got is None:
            raise ForensicsError("no cascade stands out in these runs: no first failure to follow")
        first, rows = got
        keys = [(r["source_id"], r["entry_no"]) for r in rows][:MAX_LINES]
        found = s.con.execute(
            """SELECT e.ts_us, e.host, s.run, e.source_id, e.entry_no, e.message
               FROM (SELECT unnest(?::INTEGER[]) AS source_id, unnest(?::BIGINT[]) AS entry_no) k
               JOIN entries e USING (source_id, entry_no) JOIN sources s USING (source_id)""",
            [[k[0] for k in keys], [k[1] for k in keys]],
        ).fetchall()
        shifts, clock = _shifts(s)
        root = keys[0]
        lines = [_line(*r, shifts, about="first failure" if (r[3], r[4]) == root else "echo")
                 for r in found]  # fmt: skip
        lines.sort(key=_order)
        f = Follow("cascade", [], [], shifts, clock, lines, truncated=len(rows) > MAX_LINES,
                   around_s=around, summary=first.headline())  # fmt: skip
        if around is not None:
            f.lines = _merge(lines, _around(s, lines, shifts, around))
        return f


def _lines(s: Scope, needles: list[str], shifts: dict[str, int]) -> tuple[list[FollowLine], bool]:
    like = " OR ".join("contains(e.message, ?)" for _ in needles)
    swhere, sparams = s.where("s.run")
    rows = s.con.execute(
        f"""SELECT e.ts_us, e.host, s.run, e.source_id, e.entry_no, e.message
            FROM entries e JOIN sources s USING (source_id)
            WHERE {swhere} AND ({like})
            ORDER BY e.ts_us NULLS LAST, e.host, e.source_id, e.entry_no
            LIMIT {MAX_LINES + 1}""",
        [*sparams, *needles],
    ).fetchall()
    lines = [_line(ts, h, r, sid, no, m, shifts) for ts, h, r, sid, no, m in rows[:MAX_LINES]]
    lines.sort(key=_order)
    return lines, len(rows) > MAX_LINES


def _traced(s: Scope, rids: list[str], rooms: list[int], lines: list[FollowLine],
            shifts: dict[str, int]) -> list[FollowLine]:  # fmt: skip
    """Every span of the traces a span of the request is in (SGLang names the rid on its
    root span only; its slices are that root's children), beside the lines already found."""
    where, params = s.where("p.run")
    rows = s.con.execute(
        f"""WITH mine AS (SELECT DISTINCT run, trace_id FROM spans
                          WHERE rid IN (SELECT unnest(?::VARCHAR[]))
                             OR x_request_id IN (SELECT unnest(?::VARCHAR[]))
                             OR room IN (SELECT unnest(?::UBIGINT[])))
            SELECT e.ts_us, e.host, p.run, e.source_id, e.entry_no, e.message
            FROM spans p JOIN mine USING (run, trace_id)
            JOIN entries e USING (source_id, entry_no)
            WHERE {where} LIMIT {MAX_LINES}""",
        [rids, rids, rooms, *params],
    ).fetchall()
    seen = {(ln.source_id, ln.entry_no) for ln in lines}
    return [_line(*r, shifts, about="span") for r in rows if (r[3], r[4]) not in seen]


def _line(ts, h, r, sid, no, m, shifts, about: str = "request") -> FollowLine:
    on_ref = ts + shifts.get(h or "", 0) if ts is not None else None
    return FollowLine(on_ref, ts, h, r, sid, no, m, about)


def _order(ln: FollowLine) -> tuple:
    return (ln.ts_us is None, ln.ts_us or 0, ln.host or "", ln.entry_no)


def _harness(s: Scope, rids: list[str], rooms: list[int]) -> list[dict]:
    where, params = s.where()
    cols = ["run", "session", "round", "rid", "room", "status", "corrupted", "reason",
            "start_us", "end_us"]  # fmt: skip
    return [
        dict(zip(cols, r, strict=True))
        for r in s.con.execute(
            f"""SELECT {", ".join(cols)} FROM results WHERE {where}
                AND (rid IN (SELECT unnest(?::VARCHAR[]))
                     OR room IN (SELECT unnest(?::UBIGINT[])))
                ORDER BY start_us""",
            [*params, rids, rooms],
        ).fetchall()
    ]


def _verdicts(s: Scope, rooms: list[int]) -> list[dict]:
    if not rooms:
        return []
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""SELECT DISTINCT room, verdict, run FROM rooms
            WHERE {where} AND room IN (SELECT unnest(?::UBIGINT[])) ORDER BY room, run""",
        [*params, rooms],
    ).fetchall()
    return [{"room": r, "verdict": v, "run": run} for r, v, run in rows]


def _around(
    s: Scope, lines: list[FollowLine], shifts: dict[str, int], seconds: float
) -> list[FollowLine]:
    """The other events on the request's hosts within `seconds` of its lines, and the
    lines of every template `suspects` ranks above noise (the line a headline blames is
    one no pattern reads)."""
    hosts = sorted({ln.host for ln in lines if ln.host})
    times = [ln.raw_ts_us for ln in lines if ln.raw_ts_us is not None]
    if not hosts or not times:
        return []
    pad = round(seconds * 1e6)
    mine = {(ln.source_id, ln.entry_no) for ln in lines}
    where, params = s.where("e.run")
    rows = s.con.execute(
        f"""SELECT DISTINCT e.ts_us, e.host, e.run, e.source_id, e.entry_no, n.message
            FROM (SELECT ts_us, host, run, source_id, entry_no FROM events
                  UNION ALL
                  SELECT ts_us, host, run, source_id, entry_no FROM transfers
                  WHERE pattern IN ('transfer_failed', 'bootstrap_failed', 'handshake_failed')
                  UNION ALL
                  SELECT ts_us, host, run, source_id, entry_no FROM lines
                  WHERE template IN (SELECT unnest(?::UBIGINT[]))
                 ) e
            JOIN entries n USING (source_id, entry_no)
            WHERE {where} AND e.host IN (SELECT unnest(?::VARCHAR[]))
              AND e.ts_us BETWEEN ? AND ?
            ORDER BY e.ts_us LIMIT {MAX_LINES}""",
        [_ranked_templates(s), *params, hosts, min(times) - pad, max(times) + pad],
    ).fetchall()
    return [_line(*r, shifts, about="around") for r in rows if (r[3], r[4]) not in mine]


def _ranked_templates(s: Scope) -> list[int]:
    """The templates of the lines near the transfer `suspects` ranks above noise."""
    from .suspects import suspects
    from .suspects.rank import NOISE, TIERS

    above = [x for x in suspects(s).lines() if TIERS[x.verdict] < TIERS[NOISE]]
    return sorted({int(x.feature.split()[-1], 16) for x in above if x.feature.startswith("line ")})


def _merge(lines: list[FollowLine], extra: list[FollowLine]) -> list[FollowLine]:
    return sorted([*lines, *extra], key=_order)


def _fold(lines: list[FollowLine]) -> tuple[list[FollowLine], int]:
    """Consecutive step records of one host as one line: the steps' range and count."""
    out: list[FollowLine] = []
    run: list[tuple[FollowLine, int]] = []
    folded = 0

    def flush() -> None:
        nonlocal folded
        if len(run) == 1:
            out.append(run[0][0])
        elif run:
            first, lo = run[0]
            hi = run[-1][1]
            out.append(FollowLine(first.ts_us, first.raw_ts_us, first.host, first.run,
                                  first.source_id, first.entry_no,
                                  f"forensics:step × {len(run)} (steps {lo}–{hi}; --all "
                                  "shows each)", "steps"))  # fmt: skip
            folded += len(run)
        run.clear()

    for ln in lines:
        m = STEP.match(ln.message)
        if m and (not run or run[0][0].host == ln.host):
            run.append((ln, int(m.group(1))))
            continue
        flush()
        if m:
            run.append((ln, int(m.group(1))))
        else:
            out.append(ln)
    flush()
    return out, folded


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
