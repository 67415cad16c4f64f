"""The dashboard's panels, a row each in PANELS: what it is called, its height, how its
data is fetched, how it is drawn and the line that says why it is not. Which panels are
drawn, their titles, heights and order on the page all derive from the table (datasette's
facets are the model): a new panel is a new row.

Timeline panels share one x axis (the decode step, or the wall time through the page's
switch; wall time alone where no step was recorded); a panel off the timeline is a figure
of its own, in its own section of the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..scope import Db, Runs, Scope, scoped
from . import data, figures


@dataclass
class Panels:
    data: dict[str, Any]  # each panel's fetched data, by its name
    notes: list[str] = field(default_factory=list)  # what was aggregated or left out
    counts: dict[str, int] = field(default_factory=dict)  # records behind the panels
    has_steps: bool = True  # decode steps recorded: else the x axis is wall time alone

    def drawn(self) -> dict[str, str | None]:
        """Each panel: None where it is drawn, else the one line saying why not ("" where
        another panel's line says it). The figures and the page's lines both read this."""
        return {p.name: p.empty(self) for p in PANELS}

    def present(self, timeline: bool = True) -> list[str]:
        """Panels with something to draw, in page order (on the timeline, or off it)."""
        on = {p.name for p in PANELS if p.timeline == timeline}
        return [k for k, why in self.drawn().items() if why is None and k in on]

    def missing(self, timeline: bool | None = None) -> list[str]:
        """The lines saying why a panel is not drawn (of the timeline's or the others'
        panels alone, where `timeline` says which)."""
        on = {p.name for p in PANELS if timeline is None or p.timeline == timeline}
        return [why for k, why in self.drawn().items() if why and k in on]


@dataclass(frozen=True)
class Panel:
    name: str
    title: str
    height: int  # px: a timeline row's share of the figure, or an own figure's height
    fetch: Callable[[data.Fetch], Any]
    draw: Callable[[go.Figure, Any, int], None]  # (figure, the fetched data, row)
    empty: Callable[[Panels], str | None]  # why it is not drawn; None where it is
    timeline: bool = True  # a row of the shared-x timeline, else a figure of its own
    secondary_y: bool = False  # a second y axis on its row (the decode load)


def _writes_empty(p: Panels) -> str | None:
    if not p.data["writes"].frame.is_empty():
        return None
    n = p.counts.get("canary", 0)
    return (f"Unexpected page writes: none in {n:,} canary records." if n
            else "Unexpected page writes: no canary records in these runs.")  # fmt: skip


def _requests_empty(p: Panels) -> str | None:
    if not p.data["requests"].is_empty():
        return None
    return "Requests: no harness result could be placed on decode steps" + (
        " (no rid or room in common)." if p.counts.get("steps") else " (no step records)."
    )


def _pages_empty(p: Panels) -> str | None:
    if not p.data["pages"].is_empty():
        return None
    if p.data["writes"].frame.is_empty():
        return ""  # not drawn, and the page writes' line says why
    return ("Page map: no pages listed." if p.counts.get("paged")
            else "Page map: the canary records give counts only, no page lists.")  # fmt: skip


def _failures_empty(p: Panels) -> str | None:
    if not p.data["failures"].frame.is_empty():
        return None
    return ("Failures: no failure line (transfer failure, collective timeout, abort, "
            "exception, or a line at level error) with a time.")  # fmt: skip


def _verdicts_empty(p: Panels) -> str | None:
    e = p.data["verdicts"]
    if any(not d.is_empty() for d in (e.rooms, e.load, e.outcomes)):
        return None
    if p.counts.get("rooms"):
        return "Transfer verdicts: no room has a time."
    return ("Transfer verdicts and load: no checksum records with times, no Decode batch "
            "lines, no corrupted request with a time.")  # fmt: skip


def _pairs_empty(p: Panels) -> str | None:
    known = p.data["pairs"].known()
    if len(known) >= 2:
        return None
    if known:
        q = known[0]
        return (f"Pairs: one prefill–decode pair ({q.prefill_host} → {q.decode_host}): "
                "nothing to compare it with.")  # fmt: skip
    return "Pairs: no judged request's prefill and decode hosts are both known."


def _spans_empty(p: Panels) -> str | None:
    df = p.data["spans"]
    if df.is_empty():
        return ("Spans: no OpenTelemetry span in a judged request's trace (ingest the "
                "collector's file exporter output; the trace must name the rid).")  # fmt: skip
    if df["corrupted"].n_unique() < 2:
        return ("Spans: the judged requests' traces are all good or all corrupted: nothing "
                "to set apart.")  # fmt: skip
    return None


PANELS: tuple[Panel, ...] = (
    Panel("writes", "Unexpected page writes (per canary layer)", 320, data.writes,
          figures.writes, _writes_empty),
    Panel("requests", "Requests over the steps they were decoded in", 420, data.requests,
          figures.requests, _requests_empty),
    Panel("pages", "Page map: unexpected writes, page × step", 320, data.pages, figures.pages,
          _pages_empty),
    Panel("failures", "Failures per host and rank: the first failure ★, its echoes faint",
          280, data.failures, figures.failures, _failures_empty),
    Panel("verdicts", "Transfer verdicts (room at decode's receive time) and decode load",
          290, data.events, figures.verdicts, _verdicts_empty, secondary_y=True),
    Panel("pairs", "Prefill × decode pairs: corruption rate's Wilson 95 % lower bound",
          420, data.pairs, figures.pairs, _pairs_empty, timeline=False),
    Panel("spans", "Span durations: corrupted requests' traces beside the good ones'", 380,
          data.spans, figures.spans, _spans_empty, timeline=False),
)  # fmt: skip
BY_NAME = {p.name: p for p in PANELS}


def fetch(scope: Scope) -> Panels:
    """Every panel's data for the scope's runs."""
    f = data.fetch_context(scope)
    got = {p.name: p.fetch(f) for p in PANELS}
    has_steps = not f.steps.is_empty() or not got["writes"].frame.is_empty()
    return Panels(got, f.notes, data.counts(f), has_steps)


def panels(db: Db = None, runs: Runs = None) -> Panels:
    with scoped(db, runs) as s:
        return fetch(s)


def timeline(db: Db = None, run: Runs = None) -> go.Figure:
    """The timeline panels of the runs' incident as one figure (the notebook API)."""
    return timeline_figure(panels(db, run))


def timeline_figure(p: Panels) -> go.Figure:
    rows = [BY_NAME[name] for name in p.present()]
    if not rows:
        fig = go.Figure()
        fig.update_layout(title="nothing to draw: no canary, step, room or failure records")
        return fig
    fig = make_subplots(
        rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.05,
        subplot_titles=[r.title for r in rows], row_heights=[r.height for r in rows],
        specs=[[{"secondary_y": r.secondary_y}] for r in rows],
    )  # fmt: skip
    for i, panel in enumerate(rows, 1):
        panel.draw(fig, p.data[panel.name], i)
    axis = "step" if p.has_steps else "time"
    if axis == "time":
        _on_wall_time(fig)
    fig.update_xaxes(title_text="decode step" if axis == "step" else "wall time (UTC, each "
                     "host's clock)", row=len(rows), col=1)  # fmt: skip
    fig.update_layout(
        height=sum(r.height for r in rows) + 140, margin=dict(l=70, r=40, t=90, b=50),
        hovermode="closest", legend=dict(orientation="h", y=1.02, x=0, yanchor="bottom"),
        template="plotly_white", meta={"panels": [r.name for r in rows], "axis": axis},
    )  # fmt: skip
    return fig


def _on_wall_time(fig: go.Figure) -> None:
    """No decode step recorded (a stock incident): every x is its wall time, and the axis
    a date axis with no step to switch back to."""
    for t in fig.data:
        if t.meta and "xt" in t.meta:
            t.x = t.meta["xt"]
            t.meta = None
    fig.update_xaxes(type="date")


def figure(p: Panels, name: str) -> go.Figure:
    """A panel off the timeline as its own figure."""
    panel = BY_NAME[name]
    fig = make_subplots(rows=1, cols=1)
    panel.draw(fig, p.data[name], 1)
    fig.update_layout(height=panel.height, margin=dict(l=90, r=40, t=30, b=50),
                      template="plotly_white", meta={"panels": [name]})  # fmt: skip
    return fig


def own_figures(p: Panels) -> list[tuple[Panel, go.Figure | None, str | None]]:
    """The panels off the timeline, in page order: each with its figure, or the line
    saying why it has none."""
    why = p.drawn()
    return [(panel, figure(p, panel.name) if why[panel.name] is None else None,
             why[panel.name]) for panel in PANELS if not panel.timeline]  # fmt: skip
