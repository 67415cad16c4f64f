"""Lines weighed where they happened: for every template (a line's masked text, or the
pattern that names it), whether a line of it was logged on the request's decode host (or
its prefill host) within Δ before its transfer or while it ran, for each Δ of a small
grid — and within Δ after its end, reported as a consequence, never a cause.

The anchor is the transfer's end where decode logged it (the probes' checksum of the
bytes received), else decode's Receive for the request, else the client's send where
decode's lines are not matched (`request_evidence.anchor`), widened by the time resolution
of the host's lines and, on the client's clock, by a second. "After" starts at the
transfer's end where a line marks it (`request_evidence.transfer_end`: the probes'
arrival, Receive plus decode's pre-allocation and transfer waits, or the first decode
step); a line between the anchor and that end was logged during the transfer and is
weighed with the lines before it, not as a consequence. The anchor's kind is a
stratum of the time-stratified test (rank.py). A line that names the request's
own rid or room is its consequence and is left out; so are the request's bookkeeping
(Receive/Finish, time stats, access lines) and load samples, which are factors of their
own. Every (template, side, Δ) is one predicate in the ranking's family: the family's
size is what `suspects` prints, Tarone's screen drops those whose margins allow no small
p before the outcome is looked at.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from ...clip import clip
from .features import Table
from .predicates import Predicate, Skipped

GRID_S = (0.25, 1.0, 4.0)  # Δ, seconds
SIDES = ("decode", "prefill")
# pattern tables whose lines are a request's own bookkeeping or load samples
NOT_FACTORS = ("rid_rooms", "http", "req_stats", "request_meta", "scheduler_status", "batches")
MAX_TEXT = 80  # characters of a template quoted in a predicate
# templates weighed per side (the ones near most requests): bounds memory (one row of
# distances per request each) on an incident of many thousand templates
MAX_TEMPLATES = 1_000


@dataclass
class Anchors:
    at_us: np.ndarray  # int64, the anchor per request (0: unknown)
    widen_us: np.ndarray  # int64
    span_us: np.ndarray  # int64 ≥ 0: from the anchor to the transfer's end ("during")
    hosts: dict[str, np.ndarray]  # side -> host per request (None: unknown)
    rid: np.ndarray  # uint64: DuckDB's hash of the rid (0: none), as the lines' are
    room: np.ndarray  # float (NaN: unknown): compared as float64 of the 63-bit room


def anchors(con: duckdb.DuckDBPyConnection, table: Table) -> Anchors | None:
    """Each judged request's anchor, in the table's row order (None without keys)."""
    if table.keys is None or not len(table):
        return None
    with table.keyed(con, "fx_request_keys"):
        got = con.execute(
            """SELECT k.i, coalesce(e.anchor_us, 0) AS at,
                      greatest(coalesce(e.resolution_us, 1),
                               CASE e.anchor WHEN 'client' THEN 1000000 ELSE 0 END) AS widen,
                      greatest(coalesce(e.transfer_end_us - e.anchor_us, 0), 0) AS span,
                      e.decode_host, e.prefill_host, coalesce(hash(e.rid), 0) AS rid,
                      coalesce(e.room::DOUBLE, 'NaN'::DOUBLE) AS room
               FROM fx_request_keys k JOIN request_evidence e USING (run, source_id, line)"""
        ).fetchnumpy()
    n = len(table)
    i = np.asarray(got["i"], dtype=np.int64)
    at, widen, span = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    at[i], widen[i], span[i] = got["at"], got["widen"], got["span"]
    hosts = {s: np.full(n, None, dtype=object) for s in SIDES}
    for side in SIDES:
        hosts[side][i] = np.ma.filled(np.ma.asarray(got[f"{side}_host"]).astype(object), None)
    rid, room = np.zeros(n, np.uint64), np.full(n, np.nan)
    rid[i], room[i] = got["rid"], got["room"]
    return Anchors(at, widen, span, hosts, rid, room)


@dataclass
class Lines:
    """The lines that may be factors, sorted by host and time, as codes."""

    host: np.ndarray  # int64 code into `hosts`
    ts: np.ndarray  # int64 µs
    tid: np.ndarray  # int64 code into `templates`
    rid: np.ndarray  # uint64 hash of the rid an event line names (0: none)
    room: np.ndarray  # float, NaN: none
    hosts: list[str]
    templates: np.ndarray  # uint64 ids
    texts: list[str]


def _lines(con: duckdb.DuckDBPyConnection, runs: list[str] | None) -> Lines:
    from ...parsers.pattern_names import builtin_tables

    skip = sorted(name for name, table in builtin_tables().items() if table in NOT_FACTORS)
    where = "true" if runs is None else f"l.run IN ({', '.join('?' * len(runs))})"
    marks = ", ".join("?" * len(skip))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE fx_near AS
            SELECT l.host, l.ts_us, l.template,
                   coalesce(hash(e.rid), 0) AS rid, coalesce(e.room::DOUBLE, 'NaN') AS room
            FROM lines l
            LEFT JOIN (SELECT source_id, entry_no, any_value(rid) AS rid,
                              any_value(room) AS room FROM events GROUP BY ALL) e
                   USING (source_id, entry_no)
            WHERE {where} AND l.host IS NOT NULL AND l.ts_us IS NOT NULL
              AND (l.pattern IS NULL OR (l.pattern NOT IN ({marks})
                                         AND l.pattern NOT LIKE 'forensics:%'))""",
        [*(runs or []), *skip],
    )
    try:
        hosts = [
            h for (h,) in con.execute("SELECT DISTINCT host FROM fx_near ORDER BY 1").fetchall()
        ]
        kinds = con.execute(  # the texts apart: a string a line copied is most of the cost
            f"""SELECT template, any_value(coalesce(l.text, l.pattern)) FROM lines l
                WHERE {where} AND template IN (SELECT DISTINCT template FROM fx_near)
                GROUP BY 1 ORDER BY 1""",
            [*(runs or [])],
        ).fetchall()
        got = con.execute(  # codes by joins to the small lists: no window over every line
            """WITH h AS (SELECT host, row_number() OVER (ORDER BY host) - 1 AS hc
                          FROM (SELECT DISTINCT host FROM fx_near)),
                    t AS (SELECT template, row_number() OVER (ORDER BY template) - 1 AS tc
                          FROM (SELECT DISTINCT template FROM fx_near))
               SELECT hc AS host, ts_us, tc AS tid, rid, room
               FROM fx_near JOIN h USING (host) JOIN t USING (template)"""
        ).fetchnumpy()
    finally:
        con.execute("DROP TABLE IF EXISTS fx_near")
    host, ts = np.asarray(got["host"], np.int64), np.asarray(got["ts_us"], np.int64)
    # by host, then time: one int64 key sorted in numpy (DuckDB's ORDER BY of the two
    # columns cost twice the whole fetch)
    order = np.argsort(host * (int(ts.max(initial=0)) - int(ts.min(initial=0)) + 1)
                       + (ts - ts.min(initial=0)), kind="stable")  # fmt: skip
    return Lines(
        host[order], ts[order], np.asarray(got["tid"], np.int64)[order],
        np.asarray(got["rid"], np.uint64)[order], np.asarray(got["room"], float)[order], hosts,
        np.array([t for t, _ in kinds], dtype=np.uint64), [str(x) for _, x in kinds],
    )  # fmt: skip


def near(
    con: duckdb.DuckDBPyConnection, runs: list[str] | None, table: Table
) -> tuple[list[Predicate], list[Skipped]]:
    """The predicates "a line of template T on its SIDE host within Δ before (after) its
    transfer", with the distinct lines behind each (see the module)."""
    anc = anchors(con, table)
    if anc is None:
        return [], []
    got = _lines(con, runs)
    if not len(got.ts):
        return [], [Skipped("lines", "no line near any transfer (ingest with templates)")]
    known = anc.at_us != 0
    widest = int(np.median(anc.widen_us[known])) if known.any() else 0
    grid = [d for d in GRID_S if d * 1e6 >= widest]
    skipped = [Skipped("lines", f"Δ {d:g} s: below the anchors' time resolution "
                       f"({widest / 1e6:g} s)") for d in GRID_S if d not in grid]  # fmt: skip
    out: list[Predicate] = []
    for side in SIDES if grid else ():
        out += _side(side, anc, got, grid)
    return out, skipped


def near_pairs(side: str, anc: Anchors, got: Lines, span_s: float) -> tuple[np.ndarray, ...]:
    """(request, line) pairs: the side's host's lines within `span_s` before each anchor
    or after its transfer's end (widened), the request's own lines left out; their lag
    from the anchor, and which requests know their host on this side."""
    lookup = {h: i for i, h in enumerate(got.hosts)}
    req_host = np.array([lookup.get(h, -1) if h is not None else -1 for h in anc.hosts[side]],
                        dtype=np.int64)  # fmt: skip
    ok = (req_host >= 0) & (anc.at_us != 0)
    t0 = int(min(got.ts.min(), anc.at_us[ok].min(initial=got.ts.min())))
    big = int(max(got.ts.max(), anc.at_us.max()) - t0 + 10**9)
    key = got.host * big + (got.ts - t0)
    reach = anc.widen_us + int(span_s * 1e6)
    base = req_host * big + (anc.at_us - t0)
    lo = np.searchsorted(key, base - reach, "left")
    counts = np.where(ok, np.searchsorted(key, base + anc.span_us + reach, "right") - lo, 0)
    req = np.repeat(np.arange(len(counts)), counts)
    line = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(
        lo, counts)  # fmt: skip
    own = (got.rid[line] == anc.rid[req]) & (got.rid[line] != 0)
    own |= got.room[line] == anc.room[req]
    req, line = req[~own], line[~own]
    return req, line, got.ts[line] - anc.at_us[req], ok


def _side(side: str, anc: Anchors, got: Lines, grid: list[float]) -> list[Predicate]:
    """Each template's nearest line before (and after) each request, then a predicate per
    window of the grid."""
    req, line, lag, known = near_pairs(side, anc, got, max(grid))
    if not len(req):
        return []
    # template codes are dense: counts and renumbering by bincount, not a sort of pairs
    tid = got.tid[line]
    pairs = np.bincount(tid, minlength=len(got.templates))
    seen = np.flatnonzero(pairs)
    if len(seen) > MAX_TEMPLATES:  # the templates nearest most requests (not the outcome)
        seen = np.sort(seen[np.argsort(-pairs[seen], kind="stable")[:MAX_TEMPLATES]])
        chosen = np.zeros(len(got.templates), dtype=bool)
        chosen[seen] = True
        keep = chosen[tid]
        req, line, lag, tid = req[keep], line[keep], lag[keep], tid[keep]
    number = np.full(len(got.templates), -1, dtype=np.int64)
    number[seen] = np.arange(len(seen))
    tix = number[tid]
    w = anc.widen_us[req]
    end = anc.span_us[req] + w  # past the transfer's end (widened): after
    n = len(anc.at_us)
    out = []
    for after in (False, True):
        # distance past the window's near edge: before, a line at a − d − w (one during
        # the transfer: 0); after, at the end + w + d
        dist = np.where(lag > end, lag - end, np.inf) if after else np.where(
            lag <= end, np.maximum(-lag - w, 0), np.inf)  # fmt: skip
        for d in grid:
            sel = dist <= d * 1e6
            exposed = np.zeros((len(seen), n), dtype=bool)
            exposed[tix[sel], req[sel]] = True  # every write is True: repeats are harmless
            behind = np.zeros(len(got.ts), dtype=bool)
            behind[line[sel]] = True
            lines_in = np.bincount(got.tid[behind], minlength=len(got.templates))
            for k in np.flatnonzero(exposed.sum(axis=1) >= 2):
                t = int(seen[k])
                out.append(_predicate(side, after, d, int(got.templates[t]), got.texts[t],
                                      exposed[k] & known, known, int(lines_in[t])))  # fmt: skip
    return out


def _predicate(side: str, after: bool, d: float, tid: int, text: str, exposed: np.ndarray,
               known: np.ndarray, occurrences: int) -> Predicate:  # fmt: skip
    when = "after" if after else "before or during"
    words = f"“{clip(text, MAX_TEXT)}” on its {side} host within {d:g} s {when} its transfer"
    return line_predicate(side, after, d, tid, words, exposed, known, occurrences)


def template_of(feature: str) -> str | None:
    """The template id of a line predicate's feature (`line <side> <id>`), else None."""
    parts = feature.split()
    return parts[2] if len(parts) == 3 and parts[0] == "line" else None


def line_predicate(side: str, after: bool, d: float, tid: int, words: str, exposed: np.ndarray,
                   known: np.ndarray, occurrences: int) -> Predicate:  # fmt: skip
    """The predicate of template `tid` on `side` within `d` s, `words` its text."""
    return Predicate(
        f"line {side} {tid:016x}", words, exposed, known, False, f"{d:g}",
        occurrences=occurrences, after=after,
        family=f"line {tid:016x} {'after' if after else 'before'}",
    )  # fmt: skip
