"""The factors `suspects` weighs (declared in features.toml) and the table of them: one
row per judged harness request, read once from the `request_features` view."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import duckdb
import numpy as np

from ...statuses import NO_REPLY, UNCOMPARED, UNJUDGED_SQL

KINDS = ("numeric", "event", "level", "verdict", "step")
# the verdict's kind a suspect of the factor makes (features.toml's `story`)
STORIES = ("factor", "host", "pair", "integrity", "load", "time")
# How an event's window reads in a predicate (the request_evidence view's window).
WINDOWS = {
    "request": "in its window (decode's Receive→Finish for it, else the client's send→reply ±1 s)",
    "run": "anywhere in the run",
}
MAX_LEVELS = 20  # a categorical with more values is an identifier in disguise


@dataclass(frozen=True)
class Feature:
    name: str  # a column of request_features
    kind: str  # see KINDS and features.toml
    label: str  # what it is, in words
    needs: str  # what gives the evidence
    load: bool = False  # a measure of load
    window: str | None = None  # events: request | run
    levels: dict[str, str] = field(default_factory=dict)  # level -> how it reads
    # a host or rank: past MAX_LEVELS each is tested against the rest, as one family
    peers: bool = False
    story: str = "factor"  # see STORIES


@lru_cache(maxsize=1)
def declared() -> tuple[Feature, ...]:
    """The factors of features.toml, checked."""
    text = resources.files(__package__).joinpath("features.toml").read_text()
    out = []
    for d in tomllib.loads(text)["feature"]:
        f = Feature(**d)
        if f.kind not in KINDS:
            raise ValueError(f"feature {f.name}: unknown kind {f.kind!r}")
        if f.story not in STORIES:
            raise ValueError(f"feature {f.name}: unknown story {f.story!r}")
        if (f.kind == "event") != (f.window in WINDOWS):
            raise ValueError(f"feature {f.name}: an event, and only an event, has a window")
        out.append(f)
    return tuple(out)


@dataclass
class Table:
    """Judged requests (rows) × factors (columns), with their outcome and run.

    Numeric, event, step and verdict columns: float (NaN: not known) or, for verdict,
    text (None: not known); level columns: text (None: not known)."""

    columns: dict[str, np.ndarray]
    corrupted: np.ndarray  # bool
    run: np.ndarray  # text
    run_tags: dict[str, dict[str, str]] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)  # outcome unknown: why -> requests
    steps: np.ndarray | None = None  # decode step records per request (step's known mask)
    keys: tuple[np.ndarray, np.ndarray] | None = None  # each row's results file and line
    # what each row's transfer is timed by (transfer, decode, client): a stratum of lines
    anchor: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.corrupted)

    @contextmanager
    def keyed(self, con: duckdb.DuckDBPyConnection, name: str) -> Iterator[None]:
        """A temporary table `name` (i, run, source_id, line): each row's results line by
        its position in this table, to join other rows to it."""
        # lists unnested, not an Arrow table registered: building one from numpy imports
        # pandas (0.3 s of a 1 s answer)
        assert self.keys is not None
        source, line = self.keys
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE {name} AS
                SELECT generate_subscripts($3::BIGINT[], 1) - 1 AS i, unnest($1::VARCHAR[]) AS run,
                       unnest($2::INTEGER[]) AS source_id, unnest($3::BIGINT[]) AS line""",
            [[str(r) for r in self.run], np.asarray(source).tolist(), np.asarray(line).tolist()],
        )
        try:
            yield
        finally:
            con.execute(f"DROP TABLE IF EXISTS {name}")


def _as_column(values: np.ndarray, kind: str) -> np.ndarray:
    if kind in ("level", "verdict"):
        out = np.ma.filled(np.ma.asarray(values).astype(object), None)
        return np.array([None if v is None else str(v) for v in out], dtype=object)
    return np.asarray(values, dtype=float)


def load_table(
    con: duckdb.DuckDBPyConnection,
    runs: list[str],
    run_tags: dict[str, dict[str, str]],
    features: tuple[Feature, ...],
) -> Table:
    """The judged requests of `runs`; those without a verdict counted in `left_out`."""
    exprs = []
    for f in features:
        if f.kind in ("level", "verdict"):
            exprs.append(f'"{f.name}"::VARCHAR AS "{f.name}"')
        else:  # booleans and counts as numbers, NULL as NaN (fetched without a mask)
            exprs.append(f'coalesce("{f.name}"::DOUBLE, \'NaN\'::DOUBLE) AS "{f.name}"')
    marks = ", ".join("?" * len(runs))
    # in the order of their results lines: the lines near the transfer stored at ingest
    # are bits in this order (nearby.py)
    got = con.execute(
        f"""SELECT {UNJUDGED_SQL} AS unjudged, status, source_id, line,
                   corrupted, run, coalesce(steps::DOUBLE, 0) AS steps,
                   coalesce(anchor, 'client') AS anchor{"".join(", " + e for e in exprs)}
            FROM request_features WHERE run IN ({marks}) ORDER BY run, source_id, line""",
        runs,
    ).fetchnumpy()
    unjudged_rows = np.asarray(np.ma.filled(got["unjudged"], False), dtype=bool)
    status = np.ma.filled(np.ma.asarray(got["status"]).astype(object), None)
    left_out = {
        "no reply (http_error, timeout)": int(np.isin(status[unjudged_rows], NO_REPLY).sum()),
        f"unjudged ({UNCOMPARED})": int((status[unjudged_rows] == UNCOMPARED).sum()),
    }
    keep = ~unjudged_rows
    return Table(
        {f.name: _as_column(got[f.name], f.kind)[keep] for f in features},
        np.asarray(np.ma.filled(got["corrupted"], False), dtype=bool)[keep],
        np.asarray(np.ma.filled(got["run"], ""), dtype=object)[keep],
        {r: run_tags.get(r, {}) for r in runs},
        {k: v for k, v in left_out.items() if v},
        np.asarray(got["steps"], dtype=float)[keep],
        (np.asarray(got["source_id"])[keep], np.asarray(got["line"])[keep]),
        np.asarray(np.ma.filled(got["anchor"], "client"), dtype=object)[keep],
    )
