"""The dashboard's figures, as Plotly figures a notebook can show too.

`timeline` stacks the step-aligned panels on one shared x axis: unexpected page writes,
requests, the page map, transfer verdicts with decode load. Every trace's x is the
decode step; `meta["xt"]` holds the same points' wall times (ms, decode's clock) so the
page can switch the axis. `runs_compared` is the corruption rate per run.

Log text is attacker-influenced: every string drawn from the database is HTML-escaped
before it reaches a hover, a title or a label (Plotly renders a subset of HTML there).
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import polars as pl

from ..analyses.canary import page_ranges
from ..analyses.compare import Comparison, compare
from ..analyses.pairs import Pair, Pairs
from ..analyses.stats import fmt_ci, fmt_num, fmt_p
from ..analyses.suspects import Suspects
from ..analyses.suspects.rank import Suspect
from ..analyses.templates import Templates
from ..scope import Db
from .data import Events, Failures, Writes

LAYER_TRACES_MAX = 10  # more layers than this: one trace coloured by layer
VERDICT_COLOURS = {
    "match": "#9bbf9b", "partial": "#f28e2b", "stale": "#b07aa1", "mismatch": "#e15759",
    "conflict": "#8c1c13", "missing_dst": "#59636e", "missing_src": "#bab0ac",
    "incomparable": "#d4c79a",
}  # fmt: skip
CORRUPTED, OK, OUTLINE = "#d62728", "#b8b8b8", "#111111"
LOAD_COLOURS = [
    "rgba(31,119,180,0.7)",
    "rgba(255,127,14,0.7)",
    "rgba(44,160,44,0.7)",
    "rgba(148,103,189,0.7)",
    "rgba(140,86,75,0.7)",
    "rgba(23,190,207,0.7)",
]


def esc(value: object) -> str:
    """Text from the database as inert HTML (Plotly turns entities back into characters)."""
    return html.escape("" if value is None else str(value), quote=False)


def _with_time(trace, xt) -> object:
    # Plain lists, here and in x: Plotly writes numpy arrays as typed binary, which the
    # page's time switch (it swaps x for meta.xt and back) would hand on undecoded.
    trace.meta = {"xt": xt.tolist() if hasattr(xt, "tolist") else list(xt)}
    return trace


def writes(fig: go.Figure, got: Writes, row: int) -> None:
    """Unexpected pages per canary record (or step bin), one trace a layer."""
    df = got.frame
    layers = df["layer"].unique().sort().to_list()
    binned = got.bin > 1
    texts = [_write_hover(r, binned) for r in df.iter_rows(named=True)]
    df = df.with_columns(hover=pl.Series(texts, dtype=pl.String))
    size = (5 + 2.5 * pl.col("n_unexpected").fill_null(0).sqrt()).clip(upper_bound=30)
    df = df.with_columns(size=size)
    groups = [(f"layer {lay}", df.filter(pl.col("layer") == lay)) for lay in layers]
    if len(layers) > LAYER_TRACES_MAX:
        groups = [("layers", df)]
    for name, g in groups:
        marker = dict(size=g["size"].to_numpy(), opacity=0.8, line=dict(width=0))
        if len(groups) == 1 and len(layers) > 1:
            marker |= dict(color=g["layer"].to_numpy(), colorscale="Viridis",
                           colorbar=dict(title="layer", len=0.2, y=1, yanchor="top"))  # fmt: skip
        fig.add_trace(
            _with_time(
                go.Scattergl(
                    x=g["step"].to_list(), y=g["n_unexpected"].to_numpy(), mode="markers",
                    name=esc(name), marker=marker, hovertext=g["hover"].to_numpy(),
                    hoverinfo="text"
                ),
                g["t_ms"].to_numpy(),
            ),
            row=row, col=1,
        )  # fmt: skip
    fig.update_yaxes(title_text="unexpected pages", row=row, col=1, rangemode="tozero")


def _write_hover(r: dict, binned: bool) -> str:
    where = (
        f"steps {r['step']}–{r['step_last']} ({r['records']} records)"
        if binned
        else f"step {r['step']}"
    )
    lines = [
        f"<b>{where}, layer {r['layer']}</b>",
        f"run {esc(r['run'])}, host {esc(r['host'])}",
        f"expected {r['n_expected']}, changed {r['n_changed']}, unexpected {r['n_unexpected']}",
    ]
    if r["pages"] is not None:
        more = f" of {r['n_pages']}" if (r["n_pages"] or 0) > len(r["pages"]) else ""
        lines.append(f"pages {page_ranges(r['pages'])}{more}")
    if r["rids"] is not None:
        more = f" (+{r['n_rids'] - len(r['rids'])})" if (r["n_rids"] or 0) > len(r["rids"]) else ""
        lines.append("batch: " + esc(", ".join(r["rids"])) + more)
    lines.append(f"corrupted in batch: {r['corrupted']}")
    return "<br>".join(lines)


def _segments(df: pl.DataFrame, a: str, b: str) -> list:
    """x of one line segment per row, separated by None (one WebGL trace for all)."""
    out: list = []
    for x0, x1 in zip(df[a].to_list(), df[b].to_list(), strict=True):
        out += [x0, x1, None]
    return out


def requests(fig: go.Figure, got: pl.DataFrame, row: int) -> None:
    """A bar per request over its decode steps: corrupted, ok, its room's bad verdict."""
    df = got.with_columns(y=pl.int_range(pl.len()))
    hover = [
        "<br>".join([
            f"<b>{esc(r['rid'])}</b>",
            f"session {esc(r['session'])} round {r['round']}, run {esc(r['run'])}",
            f"steps {r['first_step']}–{r['last_step']}",
            f"room {r['room']}: {esc(r['verdict'] or 'no checksums')}",
            "CORRUPTED: " + esc(r["reason"] or "") if r["corrupted"] else "ok",
        ])
        for r in df.iter_rows(named=True)
    ]  # fmt: skip
    df = df.with_columns(hover=pl.Series(hover, dtype=pl.String))
    parts = [
        ("bad room (outline)", df.filter("bad_room"), OUTLINE, 10),
        ("ok", df.filter(~pl.col("corrupted")), OK, 5),
        ("corrupted", df.filter("corrupted"), CORRUPTED, 5),
    ]
    for name, g, colour, width in parts:
        if g.is_empty():
            continue
        ys = [y for v in g["y"].to_list() for y in (v, v, None)]
        hv = [h for v in g["hover"].to_list() for h in (v, v, None)]
        fig.add_trace(
            _with_time(
                go.Scattergl(
                    x=_segments(g, "first_step", "last_step"), y=ys, mode="lines+markers",
                    name=name, line=dict(color=colour, width=width),
                    marker=dict(size=width / 2 + 2, color=colour), hovertext=hv,
                    hoverinfo="text", connectgaps=False,
                ),
                _segments(g, "t0_ms", "t1_ms"),
            ),
            row=row, col=1,
        )  # fmt: skip
    fig.update_yaxes(title_text="request", row=row, col=1, showticklabels=False,
                     range=[-1, len(df)])  # fmt: skip


def pages(fig: go.Figure, got: pl.DataFrame, row: int) -> None:
    """Unexpected writes per (step bin, page bin), each bin a column exactly its steps
    wide: the heatmap's x are the columns' edges, an empty column between bins apart."""
    df = got
    bins = (df.group_by("step").agg(pl.col("step_last").max(), pl.col("t_ms").min())
            .sort("step"))  # fmt: skip
    pages = df["page"].unique().sort().to_list()
    wide = df.pivot(on="step", index="page", values="writes", aggregate_function="sum").sort("page")
    edges, times, columns = _columns(bins)
    z = [[None if c is None else r[c] for c in columns]
         for r in wide.drop("page").iter_rows(named=True)]  # fmt: skip
    fig.add_trace(
        _with_time(
            go.Heatmap(
                x=edges, y=pages, z=z, colorscale="Reds", showscale=True,
                colorbar=dict(title="writes", len=0.18, y=_row_middle(fig, row)),
                name="page map", hoverongaps=False,
                hovertemplate="step %{x}<br>page %{y}<br>unexpected writes %{z}<extra></extra>",
            ),
            times,
        ),
        row=row, col=1,
    )  # fmt: skip
    fig.update_yaxes(title_text="KV page", row=row, col=1)


def _columns(bins: pl.DataFrame) -> tuple[list[float], list[float], list[str | None]]:
    """(edges, their times, each column's bin or None for a gap) of the page map."""
    edges: list[float] = []
    times: list[float] = []
    columns: list[str | None] = []
    for step, last, t in bins.iter_rows():
        if edges and edges[-1] < step - 0.5:
            columns.append(None)  # the steps between two bins: nothing drawn
        if not edges or edges[-1] < step - 0.5:
            edges.append(step - 0.5)
            times.append(t)
        edges.append(last + 0.5)
        times.append(t + 1)
        columns.append(str(step))
    return edges, times, columns


def _row_middle(fig: go.Figure, row: int) -> float:
    """Vertical centre (paper coordinates) of a subplot row, for its colour bar."""
    lo, hi = fig.get_subplot(row, 1).yaxis.domain
    return (lo + hi) / 2


def _esc(col: str) -> pl.Expr:
    """`esc` as a column expression (None → "")."""
    text = pl.col(col).cast(pl.String).fill_null("")
    for ch, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        text = text.str.replace_all(ch, entity, literal=True)
    return text


def _plain(col: str) -> pl.Expr:
    """A value as an f-string writes it (None → "None")."""
    return pl.col(col).cast(pl.String).fill_null("None")


def _verdict_hover() -> pl.Expr:
    # Column-wise: a Python loop over 30 000 rooms took a quarter of the dashboard's time.
    reasons = pl.col("transfer_reasons").cast(pl.String)
    return pl.concat_str(
        pl.lit("<b>"), _esc("verdict"), pl.lit("</b> room "), _plain("room"),
        pl.lit("<br>rid "), _esc("rid"), pl.lit(", run "), _esc("run"),
        pl.lit("<br>"), _esc("src_host"), pl.lit(" → "), _esc("dst_host"),
        pl.lit(", decode step ≈ "), _plain("step"),
        pl.when(pl.col("stale_of").is_not_null())
        .then(pl.lit("<br>bytes of room ") + pl.col("stale_of").cast(pl.String))
        .otherwise(pl.lit("")),
        pl.when(reasons.fill_null("") != "").then(pl.lit("<br>") + _esc("transfer_reasons"))
        .otherwise(pl.lit("")),
    )  # fmt: skip


def verdicts(fig: go.Figure, got: Events, row: int) -> None:
    """Each room's verdict at decode's receive time, the corrupted requests at their
    reply's time, and each decode host's load on the second y axis."""
    df = got.rooms
    order = [v for v in VERDICT_COLOURS if v in set(df["verdict"].to_list())]
    for v in order:
        g = df.filter(pl.col("verdict") == v).with_columns(hover=_verdict_hover())
        # numpy arrays, not lists: Plotly validates and copies a list element by element
        # (x stays a list: the page's time switch swaps it for meta.xt and back)
        fig.add_trace(
            _with_time(
                go.Scattergl(
                    x=g["step"].to_list(), y=np.full(len(g), v, dtype=object),
                    mode="markers", name=v,
                    marker=dict(color=VERDICT_COLOURS[v], size=9 if v != "match" else 6,
                                symbol="diamond" if v != "match" else "circle"),
                    hovertext=g["hover"].to_numpy(), hoverinfo="text",
                ),
                g["t_ms"].to_numpy(),
            ),
            row=row, col=1, secondary_y=False,
        )  # fmt: skip
    order += _outcomes(fig, got.outcomes, row)
    if not got.load.is_empty():
        _load(fig, got.load, row)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], row=row, col=1,
                     secondary_y=False)  # fmt: skip


FAILURE_LOOK = {  # role: (legend name, symbol, size, opacity)
    "other": ("failures", "x", 9, 0.9),
    "echo": ("echoes of the first failure", "x", 9, 0.3),
    "first": ("first failure", "star", 18, 1.0),
}


def failures(fig: go.Figure, got: Failures, row: int) -> None:
    """Failure lines, a row per host and rank: the first failure a star, its echoes
    faint, the failures outside its cascade plain."""
    df = got.frame.with_columns(
        cat=pl.concat_str(pl.col("host").fill_null("?"),
                          pl.when(pl.col("tp").is_not_null())
                          .then(pl.lit(" TP") + pl.col("tp").cast(pl.String))
                          .otherwise(pl.lit(""))),
    )  # fmt: skip
    cats = sorted(set(df["cat"].to_list()))
    for role, (name, symbol, size, opacity) in FAILURE_LOOK.items():
        g = df.filter(pl.col("role") == role)
        if g.is_empty():
            continue
        hover = [_failure_hover(r) for r in g.iter_rows(named=True)]
        fig.add_trace(
            _with_time(
                go.Scattergl(
                    x=g["step"].to_list(), y=np.array(g["cat"].to_list(), dtype=object),
                    mode="markers", name=name,
                    marker=dict(color="#b00020", size=size, symbol=symbol, opacity=opacity,
                                line=dict(width=1, color=OUTLINE) if role == "first" else None),
                    hovertext=np.array(hover, dtype=object), hoverinfo="text",
                ),
                g["t_ms"].to_numpy(),
            ),
            row=row, col=1,
        )  # fmt: skip
    fig.update_yaxes(categoryorder="array", categoryarray=cats[::-1], row=row, col=1)


def pairs(fig: go.Figure, got: Pairs, row: int) -> None:
    """Prefill host × decode host: the Wilson 95 % lower bound of the corruption rate
    (the rank the report gives), the counts in each cell."""
    known = got.known()
    pre = sorted({q.prefill_host for q in known})
    dec = sorted({q.decode_host for q in known})
    cell = {(q.prefill_host, q.decode_host): q for q in known}
    z, text, hover = [], [], []
    for a in pre:
        qs = [cell.get((a, b)) for b in dec]
        z.append([None if q is None else 100 * q.rate_low for q in qs])
        text.append(["" if q is None else f"{q.corrupted}/{q.requests}" for q in qs])
        hover.append(["" if q is None else _pair_hover(q) for q in qs])
    fig.add_trace(
        go.Heatmap(
            x=[esc(b) for b in dec], y=[esc(a) for a in pre], z=z, text=text,
            texttemplate="%{text}", hovertext=hover, hoverinfo="text", colorscale="Reds",
            zmin=0, colorbar=dict(title="lower bound, %"), hoverongaps=False, name="pairs",
        ),
        row=row, col=1,
    )  # fmt: skip
    fig.update_xaxes(title_text="decode host", row=row, col=1)
    fig.update_yaxes(title_text="prefill host", row=row, col=1)


def spans(fig: go.Figure, df: pl.DataFrame, row: int) -> None:
    """Span durations by span name, the corrupted requests' traces beside the good ones'."""
    for bad, color, label in ((False, "#4c78a8", "good requests"),
                              (True, "#e45756", "corrupted requests")):  # fmt: skip
        part = df.filter(pl.col("corrupted") == bad)
        if part.is_empty():
            continue
        fig.add_trace(
            go.Box(x=[esc(n) for n in part["name"]], y=part["ms"].to_list(), name=label,
                   marker_color=color, boxpoints="outliers", legendgroup=label),
            row=row, col=1,
        )  # fmt: skip
    fig.update_layout(boxmode="group")
    fig.update_xaxes(title_text="span", row=row, col=1)
    fig.update_yaxes(title_text="duration, ms", type="log", row=row, col=1)


def _pair_hover(q: Pair) -> str:
    return (f"<b>{esc(q.prefill_host)} → {esc(q.decode_host)}</b><br>{q.corrupted}/"
            f"{q.requests} corrupted ({100 * q.rate:.1f} %, Wilson 95 % "
            f"{100 * q.rate_low:.1f}–{100 * q.rate_high:.1f} %)<br>transfer failures "
            f"{q.failures}, checksum mismatches {q.mismatches}")  # fmt: skip


def _outcomes(fig: go.Figure, df: pl.DataFrame, row: int) -> list[str]:
    """Corrupted requests at their reply's time, the judge's reason in the hover."""
    if df.is_empty():
        return []
    hover = [f"<b>CORRUPTED</b> {esc(r['rid'])}<br>session {esc(r['session'])} round "
             f"{r['round']}, run {esc(r['run'])}<br>{esc(r['reason'] or 'no reason given')}"
             for r in df.iter_rows(named=True)]  # fmt: skip
    fig.add_trace(
        _with_time(
            go.Scattergl(
                x=df["step"].to_list(), y=np.full(len(df), "corrupted", dtype=object),
                mode="markers", name="corrupted requests",
                marker=dict(color=CORRUPTED, size=9, symbol="triangle-down"),
                hovertext=np.array(hover, dtype=object), hoverinfo="text",
            ),
            df["t_ms"].to_numpy(),
        ),
        row=row, col=1, secondary_y=False,
    )  # fmt: skip
    return ["corrupted"]


def _load(fig: go.Figure, load: pl.DataFrame, row: int) -> None:
    """#running-req, one line per decode host (each with its min–max band when binned)."""
    hosts = sorted(set(load["host"].to_list()), key=lambda h: h or "")
    for i, host in enumerate(hosts):
        g = load.filter(pl.col("host").eq_missing(host))
        colour = LOAD_COLOURS[i % len(LOAD_COLOURS)]
        name = f"#running-req {host or '?'}"
        if bool((g["running_min"] != g["running_max"]).any()):
            for bound, fill in (("running_max", None), ("running_min", "tonexty")):
                fig.add_trace(
                    _with_time(
                        go.Scattergl(
                            x=g["step"].to_list(), y=g[bound].to_numpy(), mode="lines",
                            name=f"{esc(name)} min–max", legendgroup=f"load-{i}",
                            showlegend=fill is not None, fill=fill,
                            fillcolor=colour.replace("0.7)", "0.12)"), line=dict(width=0),
                            hovertemplate=f"{bound[8:]} %{{y:.0f}}<extra></extra>",
                        ),
                        g["t_ms"].to_numpy(),
                    ),
                    row=row, col=1, secondary_y=True,
                )  # fmt: skip
        fig.add_trace(
            _with_time(
                go.Scattergl(
                    x=g["step"].to_list(), y=g["running_req"].to_numpy(), mode="lines",
                    name=esc(name), legendgroup=f"load-{i}", line=dict(color=colour, width=1.5),
                    hovertemplate=f"{esc(host or '?')} #running-req %{{y:.0f}}<extra></extra>",
                ),
                g["t_ms"].to_numpy(),
            ),
            row=row, col=1, secondary_y=True,
        )  # fmt: skip
    top = float(load["running_max"].max() or 1)
    fig.update_yaxes(title_text="#running-req", row=row, col=1, secondary_y=True,
                     rangemode="tozero", showgrid=False, dtick=_step_of(top / 4))  # fmt: skip


def _step_of(x: float) -> float:
    """A round tick step near x (1, 2 or 5 times a power of ten): four or so ticks, not
    the one Plotly chose on a short panel."""
    mag = 10 ** math.floor(math.log10(max(x, 1e-9)))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= x)


def _failure_hover(r: dict) -> str:
    rank = "" if r["tp"] is None else f" TP{r['tp']}"
    what = f"{r['kind']} {r['code']}" if r["code"] else r["kind"]
    role = {"first": "FIRST FAILURE: ", "echo": "echo of the first failure: "}.get(r["role"], "")
    return (f"<b>{role}{esc(what)}</b><br>host {esc(r['host'])}{rank}, rid "
            f"{esc(r['rid'] or '-')}<br>{esc((r['detail'] or '')[:200])}")  # fmt: skip


def runs_compared(db: Db = None, runs: list[str] | None = None) -> go.Figure:
    return runs_figure(compare(db, runs))


def runs_figure(c: Comparison) -> go.Figure:
    """Corruption rate per run with Wilson 95 % error bars."""
    fig = go.Figure()
    rates = [r for r in c.rates if r.rate is not None]
    fig.add_trace(
        go.Bar(
            x=[esc(r.run) for r in rates],
            y=[100 * r.rate for r in rates],
            error_y=dict(
                type="data", symmetric=False,
                array=[100 * (r.high - r.rate) for r in rates],
                arrayminus=[100 * (r.rate - r.low) for r in rates],
            ),
            text=[f"{r.corrupted}/{r.requests}" for r in rates], textposition="inside",
            hovertext=[
                esc(r.describe()) + "<br>" + esc(" ".join(f"{k}={v}" for k, v in r.tags.items()))
                for r in rates
            ],
            hoverinfo="text", marker_color="#4e79a7", name="corruption rate",
        )
    )  # fmt: skip
    fig.update_layout(
        title="Corruption rate per run (Wilson 95 % interval)", yaxis_title="% corrupted",
        height=360, width=min(1500, 320 + 140 * len(rates)), template="plotly_white",
        margin=dict(l=70, r=40, t=60, b=50), yaxis=dict(rangemode="tozero"),
    )  # fmt: skip
    return fig


SUSPECT_COLOURS = {"suspect": "#e15759", "explained by load": "#f28e2b",
                   "less corruption with it": "#59a14f", "borderline": "#b07aa1",
                   "not significant": "#9c9c9c"}  # fmt: skip
FOREST_LINES = 25  # the ranking's first lines: past them, every line is noise


def suspects_figure(r: Suspects) -> go.Figure:
    """Forest plot: each of the ranking's first lines as its relative risk with the 95 %
    interval on a log axis, best at the top, the counts in the hover. A line without a
    finite relative risk (no corrupted request on one side) is left off and counted."""
    fig = go.Figure()
    lines = r.lines()[:FOREST_LINES]
    drawn = [s for s in lines if _finite_rr(s)]
    for verdict, colour in SUSPECT_COLOURS.items():
        mine = [s for s in drawn if s.verdict == verdict]
        if not mine:
            continue
        fig.add_trace(go.Scatter(
            x=[s.table.relative_risk for s in mine],
            y=[f"{s.group}. {esc(_short(s.predicate))}" for s in mine],
            mode="markers", marker=dict(color=colour, size=10), name=verdict,
            error_x=dict(
                type="data", symmetric=False,
                array=[s.table.rr_high - s.table.relative_risk for s in mine],
                arrayminus=[s.table.relative_risk - s.table.rr_low for s in mine],
            ),
            hovertext=[_suspect_hover(s) for s in mine], hoverinfo="text",
        ))  # fmt: skip
    order = [f"{s.group}. {esc(_short(s.predicate))}" for s in drawn]
    left_off = len(lines) - len(drawn)
    title = "Suspects: relative risk of corruption with each predicate (95 % CI)"
    if left_off:
        title += f" — {left_off} without a finite RR left off"
    fig.add_vline(x=1, line_dash="dot", line_color="#555")
    fig.update_layout(
        title=title, template="plotly_white", height=max(260, 120 + 28 * len(drawn)),
        width=1200, margin=dict(l=460, r=40, t=60, b=50),
        xaxis=dict(type="log", title="relative risk (log scale; 1 = no association)"),
        yaxis=dict(categoryorder="array", categoryarray=order[::-1], automargin=True),
    )  # fmt: skip
    return fig


TEMPLATE_ROWS = 30  # templates drawn in the per-host panel


def templates_figure(t: Templates) -> go.Figure:
    """Lines per host of the incident's templates (most severe, then most frequent, first):
    a heatmap of log counts, the exact count and the template in the hover."""
    fig = go.Figure()
    shown = t.templates[:TEMPLATE_ROWS]
    hosts = sorted({h for x in shown for h in x.hosts})
    if not shown or not hosts:
        return fig
    labels = [f"{x.level or '-'} · {x.component or '-'} · {esc(_short(x.text or '?', 70))}"
              for x in shown]  # fmt: skip
    counts = np.array([[x.hosts.get(h, 0) for h in hosts] for x in shown], dtype=float)
    hover = [[f"{esc(x.text or '(text not kept)')}<br>{esc(h or '-')}: {int(n):,} lines"
              for h, n in zip(hosts, row, strict=True)]
             for x, row in zip(shown, counts, strict=True)]  # fmt: skip
    fig.add_trace(go.Heatmap(
        z=np.log10(counts + 1), x=[esc(h or "-") for h in hosts], y=labels,
        hovertext=hover, hoverinfo="text", colorscale="Blues",
        colorbar=dict(title="lines (log10)"),
    ))  # fmt: skip
    fig.update_layout(
        title=f"Templates: lines per host ({len(shown)} of {t.total}, most severe first)",
        template="plotly_white", height=max(260, 120 + 22 * len(shown)), width=1200,
        margin=dict(l=520, r=40, t=60, b=60),
        yaxis=dict(autorange="reversed", automargin=True),
    )  # fmt: skip
    return fig


def _finite_rr(s: Suspect) -> bool:
    t = s.table
    return all(v is not None and 0 < v < float("inf")
               for v in (t.relative_risk, t.rr_low, t.rr_high))  # fmt: skip


def _short(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _suspect_hover(s: Suspect) -> str:
    t = s.table
    odds = ""
    if t.has_odds_ratio:
        odds = f"; OR {fmt_num(t.odds_ratio)} (exact {fmt_ci(t.or_low, t.or_high)})"
    return (f"{esc(s.predicate)}<br>{t.exposed_cases}/{t.exposed_total} corrupted with it vs "
            f"{t.control_cases}/{t.control_total} without<br>RR {fmt_num(t.relative_risk)} "
            f"({fmt_ci(t.rr_low, t.rr_high)}){odds}<br>{fmt_p(t.p_value)}, {fmt_p(s.q, 'q')}; "
            f"{s.verdict}")  # fmt: skip
