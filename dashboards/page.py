"""One self-contained HTML file: plotly.js inlined, figures, header and sortable tables.

Nothing is fetched when the page opens (no CDN, no fonts, no MathJax). Every value from
the database goes through `esc` (HTML) or Plotly's JSON encoder (which escapes `<`, `>`
and `/`, so no string can close the script element it sits in).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..analyses.canary import CanaryReport, page_ranges
from ..analyses.report import Report
from ..analyses.stats import fmt_pct
from ..timefmt import iso_us, span
from .figures import esc

if TYPE_CHECKING:
    from .panels import Panel

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 16px 24px; color: #222; }
p, dd { overflow-wrap: anywhere; } .wide { max-width: 100%; overflow-x: auto; }
.facts dd { min-width: 0; }
h1 { font-size: 20px; margin: 0 0 6px; } h2 { font-size: 16px; margin: 22px 0 6px; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; }
.facts dt { color: #666; } .facts dd { margin: 0; }
.conclusion { background: #fff6d5; padding: 6px 10px; border-left: 4px solid #e0b000; }
.verdict { background: #ffe9c2; padding: 8px 10px; border-left: 6px solid #d07000;
           font-size: 1.1em; font-weight: 600; }
.note { color: #555; font-size: 13px; } .empty { color: #777; font-style: italic; }
.controls button { font: inherit; padding: 3px 10px; border: 1px solid #999;
  background: #f4f4f4; cursor: pointer; } .controls button.on { background: #2d6cdf;
  color: #fff; border-color: #2d6cdf; }
table.sortable { border-collapse: collapse; font-size: 13px; }
table.sortable th, table.sortable td { border: 1px solid #ddd; padding: 3px 7px;
  text-align: left; vertical-align: top; white-space: nowrap; }
table.sortable td.text { white-space: normal; min-width: 200px; max-width: 320px;
  overflow-wrap: anywhere; }
table.sortable td.id { white-space: normal; max-width: 120px; overflow-wrap: anywhere; }
table.sortable td.time { white-space: normal; max-width: 90px; }
table.sortable th { background: #f0f0f0; cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " ▲"; }
table.sortable th[aria-sort=descending]::after { content: " ▼"; }
"""

# Switches every trace of the timeline between decode step and wall time (meta.xt), and
# sorts tables by a clicked header (numbers as numbers).
_JS = """
(function () {
  const gd = document.getElementById('timeline');
  if (gd && gd.data) {
    const steps = gd.data.map(t => t.x);
    const axes = Object.keys(gd.layout).filter(k => /^xaxis\\d*$/.test(k));
    function use(mode) {
      const xs = gd.data.map(
        (t, i) => mode === 'time' && t.meta && t.meta.xt ? t.meta.xt : steps[i]);
      const lay = {};
      axes.forEach(a => { lay[a + '.type'] = mode === 'time' ? 'date' : 'linear';
                          lay[a + '.autorange'] = true; });
      const last = axes.sort().slice(-1)[0] || 'xaxis';
      lay[last + '.title.text'] = mode === 'time' ? 'wall time (decode clock, UTC)' : 'decode step';
      Plotly.update(gd, {x: xs}, lay);
      document.querySelectorAll('.controls button').forEach(
        b => b.classList.toggle('on', b.dataset.mode === mode));
    }
    document.querySelectorAll('.controls button').forEach(
      b => b.addEventListener('click', () => use(b.dataset.mode)));
  }
  document.querySelectorAll('table.sortable').forEach(table => {
    table.querySelectorAll('th').forEach((th, col) => th.addEventListener('click', () => {
      const asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(h => h.removeAttribute('aria-sort'));
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      const body = table.tBodies[0];
      const key = r => {
        const c = r.cells[col];
        return c.dataset.v !== undefined ? c.dataset.v : c.textContent;
      };
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const x = key(a), y = key(b), nx = parseFloat(x), ny = parseFloat(y);
        const c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(r => body.appendChild(r));
    }));
  });
})();
"""


def _plot(div: str, fig: go.Figure) -> str:
    spec = pio.to_json(fig, validate=False)  # escapes <, > and /
    return (
        f'<div id="{div}"></div>\n<script>(function(){{const f = {spec};'
        f"Plotly.newPlot('{div}', f.data, f.layout, {{displaylogo: false, responsive: true}});"
        f"}})();</script>"
    )


def _table(
    tid: str,
    head: list[str],
    rows: list[list[tuple[str, object]]],
    wrap: tuple[str, ...] = (),
    ids: tuple[str, ...] = (),
    times: tuple[str, ...] = (),
) -> str:
    """rows: cells as (text, sort value or None); text is escaped here. Columns named in
    `wrap` hold free text and may wrap; those in `ids` hold long ids that may break, those
    in `times` a date and a time on two lines (so that no table is wider than a 1280-px
    page)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    cls = ['<td class="text"' if h in wrap else '<td class="id"' if h in ids
           else '<td class="time"' if h in times else "<td" for h in head]  # fmt: skip
    body = []
    for r in rows:
        cells = "".join(
            f'{c} data-v="{html.escape(str(v))}">{esc(t)}</td>'
            if v is not None
            else f"{c}>{esc(t)}</td>"
            for c, (t, v) in zip(cls, r, strict=True)
        )
        body.append(f"<tr>{cells}</tr>")
    return (  # a wide table scrolls in its own box: the page never does
        f'<div class="wide"><table class="sortable" id="{tid}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def header(rep: Report, notes: list[str]) -> str:
    cov = rep.coverage
    runs = "; ".join(
        esc(r) + (" (" + esc(", ".join(f"{k}={v}" for k, v in t.items())) + ")" if t else "")
        for r, t in cov.runs.items()
    )
    first = min((h.first_ts_us for h in cov.hosts if h.first_ts_us), default=None)
    last = max((h.last_ts_us for h in cov.hosts if h.last_ts_us), default=None)
    hosts = ", ".join(f"{esc(h.host)} ({h.entries:,})" for h in cov.hosts)
    verdicts = "; ".join(
        f"{esc(run)}: " + ", ".join(f"{n} {esc(v)}" for v, n in c.items())
        for run, c in rep.rooms.counts.items()
    )
    rates = ", ".join(
        f"{esc(r.run)} {fmt_pct(r.rate)} ({r.corrupted}/{r.requests})" for r in rep.comparison.rates
    )
    gaps = sum(g.suppressed for g in cov.gaps)
    facts = [
        ("runs", runs or "none"),
        ("time span", esc(span(first, last))),
        ("hosts (entries)", hosts or "none"),
        ("quarantined lines", f"{cov.quarantined:,}"),
        (
            "journald suppressed",
            f"{gaps:,} messages ({len(cov.gaps)} × rate limit)" if gaps else "none",
        ),
        ("room verdicts", verdicts or "no checksum records"),
        ("corruption rate", rates or "no harness results"),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    out = [
        "<h1>pd-forensics — incident dashboard</h1>",
        *_banner(rep),
        f'<dl class="facts">{dl}</dl>',
    ]
    out += [f'<p class="note">{esc(n)}</p>' for n in notes]
    return "\n".join(out)


def _banner(rep: Report) -> list[str]:
    """The verdict (its kind and statement), then the rest of the headline: its evidence."""
    head, v = rep.headline(), rep.verdict
    out = [f'<p class="verdict">verdict ({esc(v.kind.replace("_", " "))}): {esc(head[0])}</p>']
    return out + [f'<p class="conclusion">{esc(line)}</p>' for line in head[1:]]


def rooms_table(rep: Report) -> str:
    if not rep.rooms.counts:
        return (
            '<p class="empty">No checksum records: no transfer could be checked '
            "(nothing here says the bytes arrived intact).</p>"
        )
    if not rep.rooms.worst:
        return '<p class="empty">No bad rooms: every checked transfer matched.</p>'
    head = ["verdict", "room", "rid", "run", "src host", "dst host", "sent", "received",
            "stale_of", "transfer events"]  # fmt: skip
    rows = [
        [
            (r["verdict"], None), (r["room"], r["room"]), (r["rid"] or "", None),
            (r["run"], None), (r["src_host"] or "", None), (r["dst_host"] or "", None),
            (iso_us(r["src_ts_us"]), r["src_ts_us"]), (iso_us(r["dst_ts_us"]), r["dst_ts_us"]),
            (r["stale_of"] if r["stale_of"] is not None else "", None),
            (r["transfer_reasons"] or "", None),
        ]
        for r in rep.rooms.worst
    ]  # fmt: skip
    return _table(
        "rooms-table",
        head,
        rows,
        wrap=("transfer events",),
        ids=("room", "rid", "stale_of"),
        times=("sent", "received"),
    )


def steps_table(c: CanaryReport) -> str:
    if not c.steps:
        return f'<p class="empty">{esc(c.sentences()[0])}.</p>'
    head = ["step", "host", "run", "time", "layer", "expected", "changed", "unexpected",
            "pages", "batch", "corrupted"]  # fmt: skip
    rows = [
        [
            (s.step, s.step), (s.host or "", None), (s.run, None), (iso_us(s.ts_us), s.ts_us),
            (lw.layer, lw.layer), (lw.n_expected, lw.n_expected), (lw.n_changed, lw.n_changed),
            (lw.n_unexpected, lw.n_unexpected), (page_ranges(lw.pages), None),
            (", ".join(s.rids[:6]) + (f" (+{len(s.rids) - 6})" if len(s.rids) > 6 else ""),
             len(s.rids)),
            (s.corrupted, s.corrupted),
        ]
        for s in c.steps
        for lw in s.layers
    ]  # fmt: skip
    return _table("steps-table", head, rows, wrap=("batch",), times=("time",))


def render(rep: Report, timeline: go.Figure, runs: go.Figure, notes: list[str],
           empty: list[str], suspects: go.Figure | None = None,
           templates: go.Figure | None = None,
           own: list[tuple[Panel, go.Figure | None, str | None]] = ()) -> str:  # fmt: skip
    """The page. `empty`: one line per timeline panel that had nothing to draw; `own`:
    the panels with a section of their own, each a figure or the line why not."""
    has_timeline = bool(timeline.data)
    on_steps = has_timeline and (timeline.layout.meta or {}).get("axis") == "step"
    body = [
        header(rep, notes),
        '<h2>Timeline</h2>',
        (
            '<div class="controls">x axis: <button data-mode="step" class="on">decode step'
            '</button> <button data-mode="time">wall time</button></div>'
            if on_steps
            else ""
        ),
        *[f'<p class="empty">{esc(e)}</p>' for e in empty],
        _plot("timeline", timeline) if has_timeline else "",
        "<h2>Runs compared</h2>",
        _plot("runs", runs) if runs.data and runs.data[0].x else
        '<p class="empty">Runs compared: no harness results.</p>',
        *[part for panel, fig, why in own for part in (
            f"<h2>{esc(panel.title)}</h2>",
            _plot(panel.name, fig) if fig is not None else f'<p class="empty">{esc(why)}</p>',
        )],
        "<h2>Suspects</h2>",
        _plot("suspects", suspects) if suspects is not None and suspects.data else
        f'<p class="empty">Suspects: {esc(rep.suspects.sentences()[0])}</p>',
        "<h2>Templates</h2>",
        _plot("templates", templates) if templates is not None and templates.data else
        '<p class="empty">Templates: no lines (ingested before templates: ingest again).</p>',
        "<h2>Worst rooms</h2>",
        rooms_table(rep),
        "<h2>Worst steps (unexpected page writes)</h2>",
        steps_table(rep.canary),
    ]  # fmt: skip
    runs_title = ", ".join(rep.coverage.runs) or "no runs"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>pd-forensics — {esc(runs_title)}</title><style>{_CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{_JS}</script>\n</body></html>\n"
    )
