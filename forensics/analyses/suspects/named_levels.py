"""A value a line names as a factor (issue 52): which agent, peer, NIC, engine or device
the lines about a request name. "One bad agent among eight" is a question the per-request
factors cannot ask: the agent is in a NIXL line, not in the request's own fields.

A value is a request's level when a line naming the request (its rid or its room, in the
run its evidence is in) carries it under one of LEVEL_NAMES, or when a host-level line
(one that names no request: `Context is not active: mlx5_bond_2`, UCX's send completion
error on a device) carries it on the request's decode or prefill host within Δ before its
transfer — the narrowest of nearby.py's windows the anchors' time resolution allows, and
never after (a consequence is no cause). Each name with two values or more is a factor:
each value a predicate (`a line about it names agent X`) against the rest, the name's
values one family (Simes, as hosts past the categorical limit are): the values of a name
are as many as the deployment has agents or NICs."""

from __future__ import annotations

import duckdb
import numpy as np

from .features import Table
from .nearby import GRID_S, SIDES, Lines, anchors, near_pairs
from .predicates import Predicate, Skipped

# the names whose values say which component carried a request (parsers/namer.py names
# them; `peer_nic`/`local_nic` are Mooncake's slice failure's)
LEVEL_NAMES = ("agent", "remote_agent", "peer", "nic", "local_nic", "peer_nic", "engine",
               "engine_id", "remote_engine_id", "device", "segment", "session", "worker",
               "worker_id")  # fmt: skip
PREFIX = "named "  # the factor's name: `named agent`
# the names that make a line a request's own (its values go by the rid/room path)
REQUEST_NAMES = ("rid", "request", "request_id", "x_request_id", "room", "bootstrap_room")


def named_levels(
    con: duckdb.DuckDBPyConnection, table: Table
) -> tuple[list[Predicate], list[Skipped]]:
    """The predicates of every named value that tells requests apart."""
    if table.keys is None or not len(table):
        return [], []
    names = ", ".join(f"'{n}'" for n in LEVEL_NAMES)
    with table.keyed(con, "fx_named_keys"):
        _leveled(con, names)
        try:
            got = con.execute(
                f"""WITH req AS (
                        SELECT k.i, e.evidence_run AS run, e.rid, CAST(e.room AS VARCHAR) AS room
                        FROM fx_named_keys k JOIN request_evidence e USING (run, source_id, line)
                    ), naming AS (  -- two equi-joins, not an OR (a nested loop)
                        SELECT r.i, v.source_id, v.entry_no FROM req r
                        JOIN fx_named_vals v ON v.run = r.run AND v.value = r.rid
                        UNION
                        SELECT r.i, v.source_id, v.entry_no FROM req r
                        JOIN fx_named_vals v ON v.run = r.run AND v.value = r.room
                    )
                    SELECT DISTINCT n.i, v.name, v.value FROM naming n
                    JOIN fx_named_vals v USING (source_id, entry_no)
                    WHERE v.name IN ({names})"""
            ).fetchall()
            host_level = _host_lines(con, names)
        finally:
            con.execute("DROP TABLE IF EXISTS fx_named_vals")
    near, delta = _near_host(con, table, host_level)
    return _predicates(sorted(set(got) | near), len(table), delta)


def _leveled(con: duckdb.DuckDBPyConnection, names: str) -> None:
    """fx_named_vals: every named value of the lines (of the requests' evidence runs) that
    name a level — only those can give a request a level, and reading them from `lines`
    skips the line_values view's number parsing of every value of every line (2 of a
    3 s answer at 1.5 M lines)."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE fx_named_vals AS
            WITH leveled AS (
                SELECT run, host, ts_us, source_id, entry_no, named FROM lines
                WHERE named IS NOT NULL
                  AND run IN (SELECT DISTINCT e.evidence_run FROM fx_named_keys k
                              JOIN request_evidence e USING (run, source_id, line))
                  AND list_has_any(map_keys(named), [{names}])
            )
            SELECT run, host, ts_us, source_id, entry_no,
                   unnest(map_keys(named)) AS name, unnest(map_values(named)) AS value
            FROM leveled"""
    )


def _host_lines(con: duckdb.DuckDBPyConnection, names: str) -> dict[str, np.ndarray]:
    """(host, ts_us, name, value) of the leveled lines that name no request."""
    requests = ", ".join(f"'{n}'" for n in REQUEST_NAMES)
    return con.execute(
        f"""WITH v AS (
                SELECT host, ts_us, source_id, entry_no, name, value FROM fx_named_vals
                WHERE host IS NOT NULL AND ts_us IS NOT NULL
            ), hostwide AS (
                SELECT source_id, entry_no FROM v GROUP BY ALL
                HAVING NOT bool_or(name IN ({requests}))
            )
            SELECT v.host, v.ts_us, v.name, v.value FROM v JOIN hostwide USING (source_id, entry_no)
            WHERE v.name IN ({names})"""
    ).fetchnumpy()


def _near_host(
    con: duckdb.DuckDBPyConnection, table: Table, got: dict[str, np.ndarray]
) -> tuple[set[tuple[int, str, str]], float | None]:
    """(request, name, value) of the host-level lines on a request's decode or prefill
    host within Δ before its transfer (or in its widened anchor), and that Δ."""
    if not len(got["host"]):
        return set(), None
    anc = anchors(con, table)
    known = anc.at_us != 0 if anc is not None else None
    if anc is None or not known.any():
        return set(), None
    widest = int(np.median(anc.widen_us[known]))
    delta = next((d for d in GRID_S if d * 1e6 >= widest), GRID_S[-1])
    hosts = sorted({str(h) for h in got["host"]})
    code = np.array([hosts.index(str(h)) for h in got["host"]], dtype=np.int64)
    ts = np.asarray(got["ts_us"], dtype=np.int64)
    order = np.lexsort((ts, code))
    lines = Lines(code[order], ts[order], np.zeros(len(ts), np.int64),
                  np.zeros(len(ts), np.uint64), np.full(len(ts), np.nan), hosts,
                  np.zeros(0, np.uint64), [])  # fmt: skip
    name, value = np.asarray(got["name"])[order], np.asarray(got["value"])[order]
    out: set[tuple[int, str, str]] = set()
    for side in SIDES:
        req, line, lag, _ = near_pairs(side, anc, lines, delta)
        # before the transfer or while it ran, within Δ of its start
        before = lag <= anc.widen_us[req] + anc.span_us[req]
        out |= {(int(r), str(name[k]), str(value[k])) for r, k in
                zip(req[before], line[before], strict=True)}  # fmt: skip
    return out, delta


def _predicates(
    rows: list[tuple], n: int, delta: float | None = None
) -> tuple[list[Predicate], list[Skipped]]:
    by_name: dict[str, dict[str, list[int]]] = {}
    for i, name, value in rows:
        by_name.setdefault(name, {}).setdefault(str(value), []).append(int(i))
    out: list[Predicate] = []
    skipped: list[Skipped] = []
    about = "" if delta is None else (f" (naming its rid or room, or on its host within "
                                      f"{delta:g} s before or during its transfer)")  # fmt: skip
    for name in sorted(by_name):
        levels = by_name[name]
        known = np.zeros(n, dtype=bool)
        for rows_of in levels.values():
            known[rows_of] = True
        feature = PREFIX + name
        if len(levels) < 2:
            skipped.append(Skipped(feature, "one value only"))
            continue
        for value in sorted(levels):
            exposed = np.zeros(n, dtype=bool)
            exposed[levels[value]] = True
            out.append(value_predicate(name, value, f"a line about it names {name} {value}"
                                       f"{about}", exposed, known))  # fmt: skip
    return out, skipped


def value_predicate(name: str, value: str, words: str, exposed: np.ndarray,
                    known: np.ndarray) -> Predicate:  # fmt: skip
    """ "A line about it names `name` `value`": its name's values one family."""
    feature = PREFIX + name
    return Predicate(feature, words, exposed, known, level=value, family=f"peers {feature}")
