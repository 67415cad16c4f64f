"""What the dashboard draws, fetched from DuckDB and cut to a point budget there.

Every panel's rows carry two x positions: the decode step and the wall time (decode's
clock, ms since the epoch) so that the page can switch its shared axis between them.
Above a panel's budget the rows are aggregated in SQL (step bins) or thinned (rooms that
matched), never in Python, so a million canary rows cost a GROUP BY, not a million dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import polars as pl

from ..analyses.runs import run_filter
from ..statuses import BAD_VERDICTS

POINT_BUDGET = 20_000  # canary markers (all layers)
REQUEST_BUDGET = 2_000  # request bars
ROOM_BUDGET = 20_000  # verdict markers
LOAD_BUDGET = 4_000  # decode-load points
# page-map columns: a step bin at most 2 px wide on a 1280-px page (one step per column
# when the steps fit)
HEATMAP_STEPS = 600
HEATMAP_PAGES = 200  # page-map rows
PAGES_SHOWN = 8  # first pages in a hover
RIDS_SHOWN = 4  # first rids in a hover


@dataclass
class Panels:
    canary: pl.DataFrame
    canary_bin: int  # steps per marker: 1 = one marker per canary record
    requests: pl.DataFrame
    pages: pl.DataFrame  # heatmap cells
    rooms: pl.DataFrame
    load: pl.DataFrame  # binned: the mean, and the min and max within each bin
    notes: list[str] = field(default_factory=list)  # what was aggregated or left out
    failures: pl.DataFrame | None = None  # transfer failures and aborts, one marker each
    has_steps: bool = True  # decode steps recorded: else the x axis opens on wall time
    outcomes: pl.DataFrame | None = None  # corrupted requests at their reply's time
    counts: dict[str, int] = field(default_factory=dict)  # records behind the panels

    def drawn(self) -> dict[str, str | None]:
        """Each timeline panel: None where it is drawn, else the one line saying why not
        ("" where another panel's line says it). The figure and the page's list of
        missing panels both read this."""
        c = self.counts
        out: dict[str, str | None] = {}
        out["writes"] = (
            None
            if not self.canary.is_empty()
            else (
                f"Unexpected page writes: none in {c.get('canary', 0):,} canary records."
                if c.get("canary")
                else "Unexpected page writes: no canary records in these runs."
            )
        )
        out["requests"] = (
            None
            if not self.requests.is_empty()
            else (
                "Requests: no harness result could be placed on decode steps"
                + (" (no rid or room in common)." if c.get("steps") else " (no step records).")
            )
        )
        if not self.pages.is_empty():
            out["pages"] = None
        elif self.canary.is_empty():
            out["pages"] = ""  # not drawn, and the page writes' line says why
        else:
            out["pages"] = (
                "Page map: no pages listed."
                if c.get("paged")
                else "Page map: the canary records give counts only, no page lists."
            )
        events = [self.rooms, self.load, self.failures, self.outcomes]
        out["verdicts"] = (
            None
            if any(d is not None and not d.is_empty() for d in events)
            else (
                "Transfer verdicts: no room has a time."
                if c.get("rooms")
                else "Transfer verdicts and events: no checksum records with times, no Decode "
                "batch lines, no transfer failure, abort or corrupted request with a time."
            )
        )
        return out  # fmt: skip

    def present(self) -> list[str]:
        """Panels with something to draw, in page order."""
        return [k for k, why in self.drawn().items() if why is None]

    def missing(self) -> list[str]:
        return [why for why in self.drawn().values() if why]


def _df(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> pl.DataFrame:
    return con.sql(sql, params=params).pl()


def panels(con: duckdb.DuckDBPyConnection, runs: list[str] | None = None) -> Panels:
    where, params = run_filter(runs)
    notes: list[str] = []
    canary, width, n_canary = _canary(con, where, params)
    if width > 1:
        notes.append(
            f"unexpected page writes: {n_canary:,} canary records aggregated into bins of "
            f"{width:,} steps per layer (budget {POINT_BUDGET:,} points)"
        )
    requests, n_req = _requests(con, where, params)
    if n_req > len(requests):
        notes.append(
            f"requests: {len(requests):,} of {n_req:,} drawn (budget {REQUEST_BUDGET:,}): "
            f"corrupted first, then bad-room, then those in steps with unexpected writes, "
            f"then the rest, evenly spaced where a group does not fit"
        )
    steps = _step_times(con, where, params)
    rooms, n_rooms = _rooms(con, where, params, steps)
    if n_rooms > len(rooms):
        notes.append(
            f"transfer verdicts: {len(rooms):,} of {n_rooms:,} rooms drawn (budget "
            f"{ROOM_BUDGET:,}): bad rooms first, then evenly spaced matches"
        )
    pages, load = _pages(con, where, params), _load(con, where, params, steps)
    failures, n_fail = _failures(con, where, params, steps)
    if n_fail > len(failures):
        notes.append(f"failures: {len(failures):,} of {n_fail:,} drawn (budget {ROOM_BUDGET:,})")
    outcomes, n_out = _outcomes(con, where, params, steps)
    if n_out > len(outcomes):
        notes.append(f"corrupted requests: {len(outcomes):,} of {n_out:,} drawn "
                     f"(budget {ROOM_BUDGET:,})")  # fmt: skip
    return Panels(canary, width, requests, pages, rooms, load, notes, failures,
                  has_steps=not steps.is_empty() or not canary.is_empty(), outcomes=outcomes,
                  counts=_counts(con, where, params))  # fmt: skip


def _counts(con, where: str, params: list) -> dict[str, int]:
    """The records behind the panels, for the lines that say why one is not drawn."""
    row = con.execute(
        f"""SELECT (SELECT count(*) FROM canary WHERE {where}),
                   (SELECT count(*) FROM canary_writes WHERE {where} AND pages IS NOT NULL),
                   (SELECT count(*) FROM steps WHERE {where}),
                   (SELECT count(*) FROM rooms WHERE {where})""",
        params * 4,
    ).fetchall()[0]
    return dict(zip(("canary", "paged", "steps", "rooms"), row, strict=True))


def _outcomes(con, where: str, params: list, steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Corrupted requests at the time their reply ended, with the judge's reason."""
    body = f"""SELECT run, rid, session, round, room, coalesce(reason, '') AS reason,
                      coalesce(end_us, start_us) AS ts_us FROM results
               WHERE {where} AND corrupted AND coalesce(end_us, start_us) IS NOT NULL"""
    (n,) = con.execute(f"SELECT count(*) FROM ({body})", params).fetchall()[0]
    df = _df(con, f"SELECT *, ts_us / 1000 AS t_ms FROM ({body}) ORDER BY ts_us "
                  f"LIMIT {ROOM_BUDGET}", params)  # fmt: skip
    return _at_step(df, steps), n


def _failures(con, where: str, params: list, steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """SGLang's transfer failures and aborts, at their decode step (first ones first)."""
    body = f"""SELECT run, host, ts_us, 'transfer: ' || coalesce(exception, pattern) AS kind,
                      rid, reason AS detail FROM transfers
               WHERE {where} AND ts_us IS NOT NULL
               UNION ALL
               SELECT run, host, ts_us, kind, rid, detail FROM events
               WHERE {where} AND ts_us IS NOT NULL
                 AND kind IN ('abort', 'oom_abort', 'too_long', 'room_failed', 'lost_connection',
                              'session_failed')"""
    (n,) = con.execute(f"SELECT count(*) FROM ({body})", params + params).fetchall()[0]
    df = _df(con, f"SELECT *, ts_us / 1000 AS t_ms FROM ({body}) ORDER BY ts_us "
                  f"LIMIT {ROOM_BUDGET}", params + params)  # fmt: skip
    return _at_step(df, steps), n


def _canary(con, where: str, params: list) -> tuple[pl.DataFrame, int, int]:
    stats = con.execute(
        f"""SELECT count(*), count(DISTINCT layer), min(step), max(step)
            FROM canary_writes WHERE {where}""",
        params,
    ).fetchall()[0]
    n, layers, lo, hi = stats
    if n <= POINT_BUDGET:
        df = _df(
            con,
            f"""SELECT run, host, layer, step, step AS step_last, ts_us / 1000 AS t_ms,
                       1 AS records, n_expected, n_changed, n_unexpected,
                       pages[1:{PAGES_SHOWN}] AS pages, len(pages) AS n_pages,
                       rids[1:{RIDS_SHOWN}] AS rids, len(rids) AS n_rids, corrupted
                FROM canary_writes WHERE {where}
                ORDER BY layer, step""",
            params,
        )
        return df, 1, n
    per_layer = max(1, POINT_BUDGET // max(1, layers))
    width = max(1, -(-(hi - lo + 1) // per_layer))
    df = _df(
        con,
        f"""SELECT any_value(run) AS run, any_value(host) AS host, layer,
                   min(step) AS step, max(step) AS step_last, min(ts_us) / 1000 AS t_ms,
                   count(*) AS records, sum(n_expected) AS n_expected,
                   sum(n_changed) AS n_changed, sum(n_unexpected) AS n_unexpected,
                   NULL::BIGINT[] AS pages, NULL::BIGINT AS n_pages,
                   NULL::VARCHAR[] AS rids, NULL::BIGINT AS n_rids,
                   sum(corrupted) AS corrupted
            FROM canary_writes WHERE {where}
            GROUP BY layer, (step - {lo}) // {width}
            ORDER BY layer, step""",
        params,
    )
    return df, width, n


def _requests(con, where: str, params: list) -> tuple[pl.DataFrame, int]:
    """One row per request with step records: its span in steps and in decode time."""
    df = _df(
        con,
        f"""SELECT run, session, round, rid, room, verdict, corrupted, reason, first_step,
                   last_step, first_step_us / 1000 AS t0_ms, last_step_us / 1000 AS t1_ms,
                   unexpected_steps,
                   coalesce(verdict IN ({", ".join("?" * len(BAD_VERDICTS))}), false) AS bad_room
            FROM requests WHERE {where} AND first_step IS NOT NULL
            ORDER BY first_step, rid""",
        [*BAD_VERDICTS, *params],
    )
    n = len(df)
    if n > REQUEST_BUDGET:
        rank = (
            pl.when("corrupted").then(0).when("bad_room").then(1)
            .when(pl.col("unexpected_steps") > 0).then(2).otherwise(3)
        )  # fmt: skip
        df = _thin(df, rank, REQUEST_BUDGET).sort("first_step", "rid")
    return df, n


def _pages(con, where: str, params: list) -> pl.DataFrame:
    """Unexpected writes per (step bin, page bin)."""
    stats = con.execute(
        f"""SELECT min(step), max(step), min(p), max(p) FROM (
                SELECT step, unnest(pages) AS p FROM canary_writes WHERE {where})""",
        params,
    ).fetchall()[0]
    if stats[0] is None:
        return pl.DataFrame(
            schema={"step": pl.Int64, "step_last": pl.Int64, "t_ms": pl.Float64,
                    "page": pl.Int64, "page_last": pl.Int64, "writes": pl.Int64}
        )  # fmt: skip
    s0, s1, p0, p1 = stats
    sw = max(1, -(-(s1 - s0 + 1) // HEATMAP_STEPS))
    pw = max(1, -(-(p1 - p0 + 1) // HEATMAP_PAGES))
    return _df(
        con,
        f"""SELECT {s0} + sb * {sw} AS step, {s0} + sb * {sw} + {sw} - 1 AS step_last,
                   min(ts_us) / 1000 AS t_ms,
                   {p0} + pb * {pw} AS page, {p0} + pb * {pw} + {pw} - 1 AS page_last,
                   count(*) AS writes
            FROM (SELECT sb, ts_us, (p - {p0}) // {pw} AS pb
                  FROM (SELECT (step - {s0}) // {sw} AS sb, ts_us, unnest(pages) AS p
                        FROM canary_writes WHERE {where}))
            GROUP BY sb, pb ORDER BY sb, pb""",
        params,
    )


def _thin(df: pl.DataFrame, rank: pl.Expr, budget: int) -> pl.DataFrame:
    """At most `budget` rows: whole ranks in order (0 first), the rank that overflows
    evenly spaced over its rows."""
    df = df.with_columns(_rank=rank)
    kept, left = [], budget
    for r in sorted(df["_rank"].unique().to_list()):
        g = df.filter(pl.col("_rank") == r)
        if len(g) > left:
            if left:
                kept.append(g.gather_every(-(-len(g) // left)))
            break
        kept.append(g)
        left -= len(g)
    return pl.concat(kept).drop("_rank")


def _step_times(con, where: str, params: list) -> pl.DataFrame:
    """(run, ts_us, step): when each decode step happened, sorted by time."""
    return _df(
        con,
        f"SELECT run, ts_us, max(step) AS step FROM steps WHERE {where} AND ts_us IS NOT NULL"
        " GROUP BY ALL ORDER BY ts_us",
        params,
    )


def _at_step(df: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Each row's decode step: the last one at or before its ts_us in its run (its first
    step before that). Polars' as-of join: DuckDB's took seconds on a million-row
    incident."""
    df = df.sort("ts_us")
    if steps.is_empty():
        return df.with_columns(step=pl.lit(0, pl.Int64))
    joined = df.join_asof(steps, on="ts_us", by="run", strategy="backward", check_sortedness=False)
    # before its run's first step: at that first step, not at 0 (the axis spans the steps)
    first = steps.group_by("run").agg(first_step=pl.col("step").min())
    joined = joined.join(first, on="run", how="left")
    return joined.with_columns(
        pl.col("step").fill_null(pl.col("first_step")).fill_null(steps["step"].min())
    ).drop("first_step")


def _rooms(con, where: str, params: list, steps: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Rooms at decode's receive time (prefill's send time when decode never got it)."""
    df = _df(
        con,
        f"""SELECT run, room, rid, verdict, stale_of, src_host, dst_host, src_ts_us,
                   dst_ts_us, coalesce(dst_ts_us, src_ts_us) AS ts_us, transfer_reasons,
                   coalesce(dst_ts_us, src_ts_us) / 1000 AS t_ms
            FROM rooms WHERE {where} AND coalesce(dst_ts_us, src_ts_us) IS NOT NULL""",
        params,
    )
    df = _at_step(df, steps)
    n = len(df)
    if n > ROOM_BUDGET:
        df = _thin(df, (pl.col("verdict") == "match").cast(pl.Int8), ROOM_BUDGET).sort("ts_us")
    return df, n


def _load(con, where: str, params: list, steps: pl.DataFrame) -> pl.DataFrame:
    """Decode load (#running-req of `Decode batch` lines) per host, binned to the budget."""
    cond = f"{where} AND lower(phase) = 'decode' AND running_req IS NOT NULL AND ts_us IS NOT NULL"
    n = con.execute(f"SELECT count(*) FROM batches WHERE {cond}", params).fetchall()[0][0]
    if n == 0:
        return pl.DataFrame(
            schema={"host": pl.String, "t_ms": pl.Float64, "step": pl.Int64,
                    "running_req": pl.Float64, "running_min": pl.Float64,
                    "running_max": pl.Float64}
        )  # fmt: skip
    width = max(1, -(-n // LOAD_BUDGET))
    binned = _df(
        con,
        f"""SELECT any_value(run) AS run, host, min(ts_us) AS ts_us,
                   avg(running_req) AS running_req, min(running_req)::DOUBLE AS running_min,
                   max(running_req)::DOUBLE AS running_max
            FROM (SELECT run, host, ts_us, running_req,
                         row_number() OVER (PARTITION BY host ORDER BY ts_us) - 1 AS i
                  FROM batches WHERE {cond})
            GROUP BY host, i // {width}""",
        params,
    )
    df = _at_step(binned, steps).sort("host", "ts_us", nulls_last=True)
    return df.select(host="host", t_ms=pl.col("ts_us") / 1000, step="step",
                     running_req="running_req", running_min="running_min",
                     running_max="running_max")  # fmt: skip
