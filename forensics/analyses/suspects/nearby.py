"""Lines weighed where they happened: for every template (a line's masked text, or the
pattern that names it), whether a line of it was logged on the request's decode host (or
its prefill host) within Δ before its transfer, for each Δ of a small grid — and within
Δ after it, reported as a consequence, never a cause.

The anchor is decode's Receive for the request (`request_evidence`'s window start; the
client's send where decode's lines are not matched), widened by the time resolution of
the host's lines and, on the client's clock, by a second. A line that names the request's
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

from .features import Table
from .predicates import Predicate, Skipped

GRID_S = (0.25, 1.0, 4.0)  # Δ, seconds
SIDES = ("decode", "prefill")
# pattern tables whose lines are a request's own bookkeeping or load samples
NOT_FACTORS = ("rid_rooms", "http", "req_stats", "request_meta", "scheduler_status", "batches")
MAX_TEXT = 80  # characters of a template quoted in a predicate


@dataclass
class Anchors:
    at_us: np.ndarray  # int64, the anchor per request (0: unknown)
    widen_us: np.ndarray  # int64
    hosts: dict[str, np.ndarray]  # side -> host per request (None: unknown)
    rid: np.ndarray  # object
    room: np.ndarray  # float (NaN: unknown): compared as float64 of the 63-bit room


def anchors(con: duckdb.DuckDBPyConnection, table: Table) -> Anchors | None:
    """Each judged request's anchor, in the table's row order (None without keys)."""
    if table.keys is None or not len(table):
        return None
    import pyarrow as pa

    keys = pa.table({"i": np.arange(len(table)), "run": table.run.astype(str),
                     "source_id": table.keys[0], "line": table.keys[1]})  # fmt: skip
    con.register("fx_request_keys", keys)
    try:
        got = con.execute(
            """SELECT k.i, e.window_start_us,
                      greatest(coalesce(e.resolution_us, 1),
                               CASE e.clock WHEN 'client' THEN 1000000 ELSE 0 END),
                      e.decode_host, e.prefill_host, e.rid, e.room::DOUBLE
               FROM fx_request_keys k JOIN request_evidence e USING (run, source_id, line)"""
        ).fetchall()
    finally:
        con.unregister("fx_request_keys")
    n = len(table)
    at, widen = np.zeros(n, np.int64), np.zeros(n, np.int64)
    hosts = {s: np.full(n, None, dtype=object) for s in SIDES}
    rid, room = np.full(n, None, dtype=object), np.full(n, np.nan)
    for i, start, w, dec, pre, r, rm in got:
        if start is None:
            continue
        at[i], widen[i] = start, w or 0
        hosts["decode"][i], hosts["prefill"][i] = dec, pre
        rid[i], room[i] = r, np.nan if rm is None else rm
    return Anchors(at, widen, hosts, rid, room)


def _lines(con: duckdb.DuckDBPyConnection, runs: list[str] | None) -> dict[str, np.ndarray]:
    from ...store.records import PATTERNS

    skip = sorted({p.name for p in PATTERNS if p.table in NOT_FACTORS})
    where = "true" if runs is None else f"l.run IN ({', '.join('?' * len(runs))})"
    marks = ", ".join("?" * len(skip))
    rel = con.execute(
        f"""SELECT l.host, l.ts_us, l.template, coalesce(l.text, l.pattern) AS text,
                   e.rid, e.room::DOUBLE AS room
            FROM lines l
            LEFT JOIN (SELECT source_id, entry_no, any_value(rid) AS rid,
                              any_value(room) AS room FROM events GROUP BY ALL) e
                   USING (source_id, entry_no)
            WHERE {where} AND l.host IS NOT NULL AND l.ts_us IS NOT NULL
              AND (l.pattern IS NULL OR (l.pattern NOT IN ({marks})
                                         AND l.pattern NOT LIKE 'forensics:%'))
            ORDER BY l.host, l.ts_us""",
        [*(runs or []), *skip],
    )
    return rel.fetchnumpy()


def near(
    con: duckdb.DuckDBPyConnection, runs: list[str] | None, table: Table
) -> tuple[list[Predicate], list[Skipped]]:
    """The predicates "a line of template T on its SIDE host within Δ before (after) its
    transfer", with the distinct lines behind each (see the module)."""
    anc = anchors(con, table)
    if anc is None:
        return [], []
    got = _lines(con, runs)
    if not len(got["ts_us"]):
        return [], [Skipped("lines", "no line near any transfer (ingest with templates)")]
    out: list[Predicate] = []
    skipped = []
    widest = int(np.median(anc.widen_us[anc.at_us != 0])) if (anc.at_us != 0).any() else 0
    grid = [d for d in GRID_S if d * 1e6 >= widest]
    skipped += [Skipped("lines", f"Δ {d:g} s: below the anchors' time resolution "
                        f"({widest / 1e6:g} s)") for d in GRID_S if d not in grid]  # fmt: skip
    codes, tids = np.unique(got["template"], return_inverse=True)[0:2]
    texts = {}
    for t, text in zip(tids, got["text"], strict=True):
        texts.setdefault(int(t), text)
    for side in SIDES:
        out += _side(side, anc, got, tids, codes, texts, grid)
    return out, skipped


def _pairs(side: str, anc: Anchors, got: dict, span_s: float) -> tuple[np.ndarray, ...]:
    """(request, line) pairs: the side's host's lines within `span_s` of each anchor
    (either way, widened), the request's own lines left out; and their signed lag."""
    host_of = np.asarray(got["host"], dtype=object)
    names, hcode = np.unique(host_of.astype(str), return_inverse=True)
    ts = np.asarray(got["ts_us"], dtype=np.int64)
    t0 = int(min(ts.min(), anc.at_us[anc.at_us != 0].min(initial=ts.min())))
    big = int(max(ts.max(), anc.at_us.max()) - t0 + 2 * 10**8)
    key = hcode.astype(np.int64) * big + (ts - t0)
    lookup = {str(h): i for i, h in enumerate(names)}
    req_host = np.array([lookup.get(str(h), -1) if h is not None else -1
                         for h in anc.hosts[side]], dtype=np.int64)  # fmt: skip
    ok = (req_host >= 0) & (anc.at_us != 0)
    reach = anc.widen_us + int(span_s * 1e6)
    base = req_host * big + (anc.at_us - t0)
    lo = np.searchsorted(key, base - reach, "left")
    hi = np.searchsorted(key, base + reach, "right")
    counts = np.where(ok, hi - lo, 0)
    req = np.repeat(np.arange(len(counts)), counts)
    line = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(
        lo, counts)  # fmt: skip
    rid = np.asarray(got["rid"], dtype=object)
    room = np.asarray(got["room"], dtype=float)
    own = (rid[line] == anc.rid[req]) & (rid[line] != None)  # noqa: E711
    own |= room[line] == anc.room[req]
    req, line = req[~own], line[~own]
    return req, line, ts[line] - anc.at_us[req], ok


def _side(side: str, anc: Anchors, got: dict, tids: np.ndarray, codes: np.ndarray,
          texts: dict, grid: list[float]) -> list[Predicate]:  # fmt: skip
    if not grid:
        return []
    req, line, lag, known = _pairs(side, anc, got, max(grid))
    n = len(anc.at_us)
    w = anc.widen_us[req]
    out = []
    for after in (False, True):
        for d in grid:
            reach = int(d * 1e6)
            sel = (lag >= -reach - w) & (lag <= w) if not after else (lag > w) & (lag <= reach + w)
            out += _exposures(side, after, d, req[sel], tids[line[sel]], line[sel], n, known,
                              codes, texts)  # fmt: skip
    return out


def _exposures(side: str, after: bool, d: float, req: np.ndarray, tid: np.ndarray,
               line: np.ndarray, n: int, known: np.ndarray, codes: np.ndarray,
               texts: dict) -> list[Predicate]:  # fmt: skip
    if not len(req):
        return []
    pair = np.unique(tid.astype(np.int64) * n + req)
    t_of, r_of = pair // n, pair % n
    occ = np.unique(tid.astype(np.int64) * (line.max() + 1) + line) // (line.max() + 1)
    occurrences = np.bincount(occ, minlength=int(tid.max()) + 1)
    out = []
    bounds = np.flatnonzero(np.diff(t_of)) + 1
    for rows, t in zip(np.split(r_of, bounds), t_of[np.r_[0, bounds]], strict=True):
        if len(rows) < 2:
            continue
        exposed = np.zeros(n, dtype=bool)
        exposed[rows] = True
        text = str(texts[int(t)])[:MAX_TEXT]
        when = "after" if after else "before"
        out.append(Predicate(
            f"line {side} {int(codes[t]):016x}",
            f"“{text}” on its {side} host within {d:g} s {when} its transfer",
            exposed & known, known.copy(), False, f"{d:g}",
            occurrences=int(occurrences[t]), after=after,
        ))  # fmt: skip
    return out
