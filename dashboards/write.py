"""`forensics dashboard`: the incident on one time axis, as one offline HTML file."""

from __future__ import annotations

import os
import time
import webbrowser
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..analyses.canary import canary
from ..analyses.report import report
from ..analyses.rooms import rooms
from ..outputs import write_text
from ..scope import Db, Runs, scoped
from . import DEFAULT_NAME


@dataclass
class DashboardResult:
    path: Path
    bytes: int
    seconds: float  # to query, build and write
    panels: list[str]  # panels drawn: the timeline's, then those of their own
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
    from ..analyses.templates import templates
    from .figures import TEMPLATE_ROWS, runs_figure, suspects_figure, templates_figure
    from .page import render
    from .panels import fetch, own_figures, timeline_figure

    t0 = time.perf_counter()
    with scoped(db, runs) as s:  # a path, a connection or the bundle's scope
        if scrub:
            from ..scrubbing import shadow

            shadow(s.con, keep=True)
            s.changed()
        s = s.narrowed(s.followed)  # the runs their results' evidence is in drawn too
        p = fetch(s)
        p.notes[:0] = s.follow_notes
        # the report the command (or the bundle) already has; the tables list more rows
        rep = replace(report(s), rooms=rooms(s, limit=200), canary=canary(s, top=200))
        empty = p.missing()
        lines = templates(s, limit=TEMPLATE_ROWS)
    timeline, own = timeline_figure(p), own_figures(p)
    page = render(rep, timeline, runs_figure(rep.comparison), p.notes, p.missing(timeline=True),
                  suspects_figure(rep.suspects), templates_figure(lines), own)  # fmt: skip
    path = Path(out) if out is not None else Path(DEFAULT_NAME)
    write_text(path, page, make_parents=True)
    res = DashboardResult(
        path, path.stat().st_size, time.perf_counter() - t0,
        [*(timeline.layout.meta["panels"] if timeline.layout.meta else []),
         *(panel.name for panel, fig, _ in own if fig is not None)], empty, p.notes,
    )  # fmt: skip
    if open_browser and not _open(path):
        res.notes.append(f"--open: no browser found here; open {path.resolve()} in one")
    return res


def _open(path: Path) -> bool:
    try:
        return webbrowser.open(path.resolve().as_uri())
    except webbrowser.Error:
        return False
