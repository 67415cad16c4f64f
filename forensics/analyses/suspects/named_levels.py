"""A value a line names as a factor (issue 52): which agent, peer, NIC, engine or device
the lines about a request name. "One bad agent among eight" is a question the per-request
factors cannot ask: the agent is in a NIXL line, not in the request's own fields.

A value is a request's level when a line naming the request (its rid or its room, in the
run its evidence is in) carries it under one of LEVEL_NAMES. Each name with two values or
more is a factor: each value a predicate (`a line naming it names agent X`) against the
rest, the name's values one family (Simes, as hosts past the categorical limit are): the
values of a name are as many as the deployment has agents or NICs."""

from __future__ import annotations

import duckdb
import numpy as np

from .features import Table
from .predicates import Predicate, Skipped

# the names whose values say which component carried a request (parsers/namer.py names
# them; `peer_nic`/`local_nic` are Mooncake's slice failure's)
LEVEL_NAMES = ("agent", "remote_agent", "peer", "nic", "local_nic", "peer_nic", "engine",
               "engine_id", "remote_engine_id", "device", "segment", "session", "worker",
               "worker_id")  # fmt: skip
PREFIX = "named "  # the factor's name: `named agent`


def named_levels(
    con: duckdb.DuckDBPyConnection, table: Table
) -> tuple[list[Predicate], list[Skipped]]:
    """The predicates of every named value that tells requests apart."""
    if table.keys is None or not len(table):
        return [], []
    names = ", ".join(f"'{n}'" for n in LEVEL_NAMES)
    with table.keyed(con, "fx_named_keys"):
        got = con.execute(
            f"""WITH req AS (
                    SELECT k.i, e.evidence_run AS run, e.rid, CAST(e.room AS VARCHAR) AS room
                    FROM fx_named_keys k JOIN request_evidence e USING (run, source_id, line)
                ), naming AS (  -- two equi-joins, not an OR (a nested loop)
                    SELECT r.i, v.source_id, v.entry_no FROM req r
                    JOIN line_values v ON v.run = r.run AND v.value = r.rid
                    UNION
                    SELECT r.i, v.source_id, v.entry_no FROM req r
                    JOIN line_values v ON v.run = r.run AND v.value = r.room
                )
                SELECT DISTINCT n.i, v.name, v.value FROM naming n
                JOIN line_values v USING (source_id, entry_no)
                WHERE v.name IN ({names})"""
        ).fetchall()
    return _predicates(got, len(table))


def _predicates(rows: list[tuple], n: int) -> tuple[list[Predicate], list[Skipped]]:
    by_name: dict[str, dict[str, list[int]]] = {}
    for i, name, value in rows:
        by_name.setdefault(name, {}).setdefault(str(value), []).append(int(i))
    out: list[Predicate] = []
    skipped: list[Skipped] = []
    for name in sorted(by_name):
        levels = by_name[name]
        known = np.zeros(n, dtype=bool)
        for rows_of in levels.values():
            known[rows_of] = True
        feature = PREFIX + name
        if len(levels) < 2:
            skipped.append(Skipped(feature, "one value only"))
            continue
        family = f"peers {feature}"
        for value in sorted(levels):
            exposed = np.zeros(n, dtype=bool)
            exposed[levels[value]] = True
            out.append(Predicate(feature, f"a line naming it names {name} {value}", exposed,
                                 known, level=value, family=family))  # fmt: skip
    return out, skipped
