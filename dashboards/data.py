"""What the dashboard draws, fetched from DuckDB and cut to a point budget there.

Each panel's fetch (a row of panels.PANELS) reads through one `Fetch`. Every timeline
row carries two x positions: the decode step and the wall time (its host's clock, ms since
the epoch) so that the page can switch its shared axis between them.
Above a panel's budget the rows are aggregated in SQL (step bins) or thinned (rooms that
matched), never in Python, so a million canary rows cost a GROUP BY, not a million dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import polars as pl

from ..analyses.cascades import first_cascade
from ..analyses.pairs import Pairs
from ..analyses.pairs import pairs as pair_table
from ..scope import Scope
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
class Fetch:
    """What every panel's fetch reads: the scope's connection and run filter, when each
    decode step happened, and the notes it adds where it aggregated or left rows out."""

    scope: Scope
    where: str
    params: list
    steps: pl.DataFrame  # (run, ts_us, step), by time
    notes: list[str] = field(default_factory=list)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        return self.scope.con


@dataclass
class Writes:
    frame: pl.DataFrame  # a marker per canary record, or per step bin and layer
    bin: int  # steps per marker: 1 = one marker per canary record


@dataclass
class Events:
    rooms: pl.DataFrame
    load: pl.DataFrame  # binned: the mean, and the min and max within each bin
    outcomes: pl.DataFrame  # corrupted requests at their reply's time


@dataclass
class Failures:
    frame: pl.DataFrame  # a marker each; `role`: first, echo (of the first) or other


def _df(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> pl.DataFrame:
    return con.sql(sql, params=params).pl()


def fetch_context(scope: Scope) -> Fetch:
    where, params = scope.where()
    return Fetch(scope, where, params, _step_times(scope.con, where, params))


def counts(f: Fetch) -> dict[str, int]:
    """The records behind the panels, for the lines that say why one is not drawn."""
    return _counts(f.con, f.where, f.params)


def writes(f: Fetch) -> Writes:
    canary, width, n = _canary(f.con, f.where, f.params)
    if width > 1:
        f.notes.append(
            f"unexpected page writes: {n:,} canary records aggregated into bins of "
            f"{width:,} steps per layer (budget {POINT_BUDGET:,} points)"
        )
    return Writes(canary, width)


def requests(f: Fetch) -> pl.DataFrame:
    df, n = _requests(f.con, f.where, f.params)
    if n > len(df):
        f.notes.append(
            f"requests: {len(df):,} of {n:,} drawn (budget {REQUEST_BUDGET:,}): "
            f"corrupted first, then bad-room, then those in steps with unexpected writes, "
            f"then the rest, evenly spaced where a group does not fit"
        )
    return df


def pages(f: Fetch) -> pl.DataFrame:
    return _pages(f.con, f.where, f.params)


def events(f: Fetch) -> Events:
    rooms, n_rooms = _rooms(f.con, f.where, f.params, f.steps)
    if n_rooms > len(rooms):
        f.notes.append(
            f"transfer verdicts: {len(rooms):,} of {n_rooms:,} rooms drawn (budget "
            f"{ROOM_BUDGET:,}): bad rooms first, then evenly spaced matches"
        )
    outcomes, n_out = _outcomes(f.con, f.where, f.params, f.steps)
    if n_out > len(outcomes):
        f.notes.append(f"corrupted requests: {len(outcomes):,} of {n_out:,} drawn "
                       f"(budget {ROOM_BUDGET:,})")  # fmt: skip
    return Events(rooms, _load(f.con, f.where, f.params, f.steps), outcomes)


def failures(f: Fetch) -> Failures:
    """Every failure line (the `failures` view) at its decode step, the first failure's
    cascade marked: its members first within the budget, then the earliest of the rest."""
    got = first_cascade(f.scope)  # the report's, kept on the scope
    cascade = [] if got is None else got[1]
    where, params = f.scope.where_followed()
    df = _df(f.con, f"""SELECT run, host, ts_us, tp, kind, code, rid, reason AS detail,
                               source_id, entry_no, ts_us / 1000 AS t_ms
                        FROM failures WHERE {where} AND ts_us IS NOT NULL""", params)  # fmt: skip
    role = pl.DataFrame(
        {"source_id": [r["source_id"] for r in cascade],
         "entry_no": [r["entry_no"] for r in cascade],
         "role": ["first"] + ["echo"] * (len(cascade) - 1) if cascade else []},
        schema={"source_id": pl.Int32, "entry_no": pl.Int64, "role": pl.String},
    )  # fmt: skip
    df = df.with_columns(pl.col("source_id").cast(pl.Int32), pl.col("entry_no").cast(pl.Int64))
    df = df.join(role, on=["source_id", "entry_no"], how="left").with_columns(
        pl.col("role").fill_null("other")
    )
    if (n := len(df)) > ROOM_BUDGET:
        rank = pl.when(pl.col("role") == "first").then(0).when(pl.col("role") == "echo").then(1)
        df = _thin(df.sort("ts_us"), rank.otherwise(2), ROOM_BUDGET)
        f.notes.append(f"failures: {len(df):,} of {n:,} drawn (budget {ROOM_BUDGET:,}): the "
                       "first failure's cascade first, then evenly spaced")  # fmt: skip
    return Failures(_at_step(df, f.steps))


def pairs(f: Fetch) -> Pairs:
    return pair_table(f.scope)


SPAN_NAMES = 12  # the span names drawn (the most frequent in judged requests' traces)


def spans(f: Fetch) -> pl.DataFrame:
    """Each span of a judged request's trace (the trace names its rid or X-Request-Id):
    its name, duration in ms, and whether the request came back corrupted; the most
    frequent SPAN_NAMES names."""
    where, params = f.scope.where("r.run")
    return _df(f.con, f"""
        WITH keyed AS (SELECT run, trace_id, rid AS key FROM spans WHERE rid IS NOT NULL
                       UNION SELECT run, trace_id, x_request_id FROM spans
                       WHERE x_request_id IS NOT NULL),
             judged AS (SELECT k.run, k.trace_id, bool_or(r.corrupted) AS corrupted
                        FROM keyed k JOIN results r ON r.rid = k.key
                        WHERE {where} GROUP BY ALL),
             timed AS (SELECT p.name, (p.end_us - p.start_us) / 1000.0 AS ms, j.corrupted
                       FROM spans p JOIN judged j USING (run, trace_id)
                       WHERE p.end_us >= p.start_us AND p.name IS NOT NULL)
        SELECT * FROM timed WHERE name IN (SELECT name FROM timed GROUP BY name
                                           ORDER BY count(*) DESC, name LIMIT {SPAN_NAMES})
        ORDER BY name, corrupted""", params)  # fmt: skip


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
