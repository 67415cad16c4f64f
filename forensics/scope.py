"""One command's read of an incident: the connection, the runs it looks at (checked once),
the runs their evidence is in, and the time window — opened once and handed to every
analysis, the dashboard, the trace and the bundle.

Modelled on sqlite-utils' `Database(filename_or_conn)`: every reader takes a path, a
connection or a scope. A path opens (and the block closes) a checked read-only connection;
a connection is used as it is (its owner closes it); a scope is shared, narrowed to other
runs without a new connection or a second look at the runs table. Answers a command
computes once (the report, the suspects) are kept on the scope, so the dashboard and the
bundle reuse them instead of computing them again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import duckdb

from .errors import ForensicsError

Runs = str | list[str] | None  # one run, several, or (None / empty) all of them
T = TypeVar("T")


def _as_list(run: Runs) -> list[str]:
    return [run] if isinstance(run, str) else list(run or [])


def run_filter(run: Runs, column: str = "run") -> tuple[str, list]:
    """A WHERE clause and its parameters selecting the runs (or all)."""
    chosen = _as_list(run)
    if not chosen:
        return "TRUE", []
    return f"{column} IN ({', '.join('?' * len(chosen))})", chosen


def all_runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, dict]]:
    """(run, tags) of every run, oldest first; runs made by one ingest (a sweep's levels)
    in the order it made them. The scope reads this once a command (`Scope.tags`)."""
    rows = con.execute("SELECT run, tags FROM runs ORDER BY created, rowid").fetchall()
    return [(r, dict(t or {})) for r, t in rows]


class Scope:
    """What a command reads through. `run`: the runs as named (None: all); `runs`: those
    runs checked to exist (every run when none was named); `followed`: the named runs and
    the runs their results' evidence is in (None: all), `follow_notes` saying so;
    `since_us`/`until_us`: the window every table and named view is restricted to."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        run: Runs = None,
        since_us: int | None = None,
        until_us: int | None = None,
        owned: bool = False,
        label: str = "the database",
        _tags: dict[str, dict] | None = None,
        _memo: dict | None = None,
    ) -> None:
        self.con = con
        self.owned, self.label = owned, label  # label: where it was opened, for people
        self.since_us, self.until_us = since_us, until_us
        self.span_us: tuple[int | None, int | None] | None = None  # outside the window too
        self.tags = dict(all_runs(con)) if _tags is None else _tags  # the one look at runs
        self._memo = {} if _memo is None else _memo
        # the stored tables as ingest left them: no window, no shadow (answers stored at
        # ingest for every run are theirs only then)
        self.pristine = since_us is None and until_us is None
        chosen = _as_list(run)
        for r in chosen:
            if r not in self.tags:
                known = ", ".join(self.tags) or "none"
                raise ForensicsError(f"no run named {r!r}; known: {known}")
        self.run: Runs = run if chosen else None
        self.runs = chosen or list(self.tags)
        self.followed, self.follow_notes = self._follow(chosen)

    def _follow(self, chosen: list[str]) -> tuple[Runs, list[str]]:
        """The named runs and the runs their results' evidence is in (`result_links`: a
        run of results whose records another run holds, as the README's repro recipe
        makes); all runs stay all runs."""
        if not chosen:
            return None, []
        marks = ", ".join("?" * len(chosen))
        links = self.con.execute(
            f"""SELECT DISTINCT run, evidence_run FROM result_links
                WHERE run IN ({marks}) AND evidence_run IS NOT NULL AND evidence_run <> run
                ORDER BY 1, 2""",
            chosen,
        ).fetchall()
        extra = [e for _, e in links if e not in chosen]
        said = [f"run {r}'s results have their evidence in run {e}: it is included"
                for r, e in links]  # fmt: skip
        return chosen + list(dict.fromkeys(extra)), said

    def where(self, column: str = "run") -> tuple[str, list]:
        """A WHERE clause selecting the named runs (TRUE: all)."""
        return run_filter(self.run, column)

    def where_followed(self, column: str = "run") -> tuple[str, list]:
        """A WHERE clause selecting the named runs and those their evidence is in."""
        return run_filter(self.followed, column)

    def narrowed(self, run: Runs) -> Scope:
        """The same connection, window and kept answers, looking at other runs."""
        if _as_list(run) == _as_list(self.run):
            return self
        s = Scope(self.con, run, self.since_us, self.until_us, False, self.label,
                  _tags=self.tags, _memo=self._memo)  # fmt: skip
        s.span_us, s.pristine = self.span_us, self.pristine
        return s

    def memo(self, key: tuple, make: Callable[[], T]) -> T:
        """An answer computed once a scope (report, suspects: the dashboard and the bundle
        reuse what the report found)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def untimed(self) -> int:
        """Entries of the scope's runs with no time (none of their own, none before them
        in their source): every time-based answer leaves them out, and says how many."""
        where, params = self.where("s.run")
        return self.memo(("untimed", tuple(self.runs)), lambda: self.con.execute(
            f"""SELECT count(*) FROM entries e JOIN sources s USING (source_id)
                WHERE {where} AND e.ts_us IS NULL""", params).fetchall()[0][0])  # fmt: skip

    def changed(self) -> None:
        """The connection's rows were shadowed (scrubbed, redacted): answers kept from
        before must not be reused."""
        self._memo.clear()
        self.pristine = False
        before = list(self.tags)
        fresh = all_runs(self.con)  # the tags are text too: read through the shadows
        # so are the run names (a run named after a URL with user-info): the shadow changes
        # text, not rows or their order, so the runs named before map one to one
        rename = dict(zip(before, (r for r, _ in fresh), strict=True))
        self.tags.clear()
        self.tags.update(dict(fresh))

        def renamed(runs: Runs) -> Runs:
            if runs is None:
                return None
            return [rename.get(r, r) for r in _as_list(runs)]

        self.run, self.followed = renamed(self.run), renamed(self.followed)
        self.runs = [rename.get(r, r) for r in self.runs]

    @property
    def window(self) -> dict[str, str | None] | None:
        """The window as UTC text (None: the whole incident)."""
        if self.since_us is None and self.until_us is None:
            return None
        from .timefmt import iso_us

        def at(us: int | None) -> str | None:
            return iso_us(us) if us is not None else None

        return {"since": at(self.since_us), "until": at(self.until_us)}

    def window_text(self) -> str:
        """' from … until …' for a headline, '' for the whole incident."""
        w = self.window
        if w is None:
            return ""
        return "".join(f" {k} {v}" for k, v in w.items() if v is not None)

    def close(self) -> None:
        if self.owned:
            self.con.close()

    def __enter__(self) -> Scope:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


Db = str | os.PathLike | duckdb.DuckDBPyConnection | Scope | None


def times(since: str | int | None, until: str | int | None) -> tuple[int | None, int | None]:
    """--since/--until as µs since the epoch (ISO 8601, epoch seconds, or µs already)."""

    def one(v: str | int | None, flag: str) -> int | None:
        if v is None or isinstance(v, int):
            return v
        from .store.overlay import parse_time  # its parser imports polars: only with a time

        return parse_time(v, flag)

    lo, hi = one(since, "--since"), one(until, "--until")
    if lo is not None and hi is not None and hi <= lo:
        raise ForensicsError("--until must be after --since")
    return lo, hi


def open_scope(
    db: Db = None, run: Runs = None, since: str | int | None = None, until: str | int | None = None
) -> Scope:
    """A scope over a path (opened read-only, checked; closed with the scope), a
    connection (used as it is) or a scope (narrowed to `run` when one is named); with a
    window, every table and named view of the connection is restricted to it."""
    if isinstance(db, Scope):
        if since is not None or until is not None:
            raise ForensicsError("a scope's window is set when it is opened")
        return db.narrowed(run) if run is not None else db
    lo, hi = times(since, until)
    owned = not isinstance(db, duckdb.DuckDBPyConnection)
    from .store.database import DEFAULT_DB, connect_read_only

    con = connect_read_only(db) if owned else db
    try:
        span = None
        if lo is not None or hi is not None:
            from .store.overlay import window

            # the whole incident's span, before the window hides it: an empty window says it
            span = con.execute("SELECT min(ts_us), max(ts_us) FROM entries").fetchall()[0]
            window(con, lo, hi)
        label = str(db if db is not None else DEFAULT_DB) if owned else "the database"
        s = Scope(con, run, lo, hi, owned, label)
        s.span_us = span
        return s
    except BaseException:
        if owned:
            con.close()
        raise


@contextmanager
def scoped(db: Db = None, run: Runs = None) -> Iterator[Scope]:
    """`open_scope` for a block: what it opened is closed after it, a scope or a
    connection handed in stays open."""
    s = open_scope(db, run)
    try:
        yield s
    finally:
        if not isinstance(db, Scope):
            s.close()
