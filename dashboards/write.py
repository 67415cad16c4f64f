"""`forensics dashboard`: the incident on one time axis, as one offline HTML file."""

from __future__ import annotations

import os
import time
import webbrowser
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..analyses.canary import canary
from ..analyses.report import report
from ..analyses.rooms import rooms
from ..outputs import write_text
from ..scope import Db, Runs, scoped
from ..store import first_row

if TYPE_CHECKING:
    from .data import Panels

DEFAULT_NAME = "forensics-dashboard.html"


@dataclass
class DashboardResult:
    path: Path
    bytes: int
    seconds: float  # to query, build and write
    panels: list[str]  # timeline panels drawn
    empty: list[str] = field(default_factory=list)  # one line per panel with no data
    notes: list[str] = field(default_factory=list)  # aggregation above the point budget

    def as_dict(self) -> dict:
        return {**self.__dict__, "path": str(self.path)}


def dashboard(
    db: Db = None,
    runs: Runs = None,
    out: str | os.PathLike | None = None,
    open_browser: bool = False,
    scrub: bool = False,
) -> DashboardResult:
    """Write the dashboard of `runs` (all when None) to `out` (default
    ./forensics-dashboard.html). `scrub`: secrets out of every value shown (on a
    connection given, its tables stay scrubbed after)."""
    # Plotly takes 0.2 s to import: only this command pays for it.
    from .data import panels
    from .figures import runs_figure, suspects_figure, timeline_figure
    from .page import render

    t0 = time.perf_counter()
    with scoped(db, runs) as s:  # a path, a connection or the bundle's scope
        if scrub:
            from ..scrubbing import shadow

            shadow(s.con, keep=True)
            s.changed()
        s = s.narrowed(s.followed)  # the runs their results' evidence is in drawn too
        p = panels(s.con, s.runs)
        p.notes[:0] = s.follow_notes
        # the report the command (or the bundle) already has; the tables list more rows
        rep = replace(report(s), rooms=rooms(s, limit=200), canary=canary(s, top=200))
        empty = _empty_lines(s.con, p, s.runs)
    timeline = timeline_figure(p)
    page = render(rep, timeline, runs_figure(rep.comparison), p.notes, empty,
                  suspects_figure(rep.suspects))  # fmt: skip
    path = Path(out) if out is not None else Path(DEFAULT_NAME)
    write_text(path, page, make_parents=True)
    res = DashboardResult(
        path, path.stat().st_size, time.perf_counter() - t0,
        list(timeline.layout.meta["panels"]) if timeline.layout.meta else [], empty, p.notes,
    )  # fmt: skip
    if open_browser and not _open(path):
        res.notes.append(f"--open: no browser found here; open {path.resolve()} in one")
    return res


def _open(path: Path) -> bool:
    try:
        return webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        return False


def _empty_lines(con, p: Panels, runs: list[str]) -> list[str]:
    """Why a panel is missing, in one line each."""
    marks = ", ".join("?" * len(runs)) or "NULL"
    n_canary, n_paged, n_steps, n_rooms = first_row(
        con,
        f"""SELECT (SELECT count(*) FROM canary WHERE run IN ({marks})),
                   (SELECT count(*) FROM canary_writes WHERE run IN ({marks})
                      AND pages IS NOT NULL),
                   (SELECT count(*) FROM steps WHERE run IN ({marks})),
                   (SELECT count(*) FROM rooms WHERE run IN ({marks}))""",
        runs * 4,
    )
    out = []
    if p.canary.is_empty():
        out.append(
            f"Unexpected page writes: none in {n_canary:,} canary records."
            if n_canary
            else "Unexpected page writes: no canary records in these runs."
        )
    if p.requests.is_empty():
        out.append(
            "Requests: no harness result could be placed on decode steps"
            + (" (no step records)." if not n_steps else " (no rid or room in common).")
        )
    if p.pages.is_empty() and not p.canary.is_empty():
        out.append(
            "Page map: the canary records give counts only, no page lists."
            if not n_paged
            else "Page map: no pages listed."
        )
    if p.rooms.is_empty() and p.load.is_empty():
        out.append(
            "Transfer verdicts: no checksum records with times and no Decode batch lines."
            if not n_rooms
            else "Transfer verdicts: no room has a time."
        )
    return out
