"""The dashboard (issue 5): figure data, point budgets, escaping — and the page in a real
browser (Debian's chromium driven by Playwright, network blocked)."""

from __future__ import annotations

import os
from pathlib import Path

import forensics.dashboards
import polars as pl
import pytest
from forensics.dashboards import data, figures, panels
from forensics.dashboards.panels import PANELS
from forensics.dashboards.write import dashboard
from playwright.sync_api import Browser, Page, sync_playwright

import forensics
from forensics.synthetic import incident
from forensics.synthetic.incident import Entry

from .helpers import cli

CHROMIUM = "/usr/bin/chromium"
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    return forensics.demo(tmp_path_factory.mktemp("demo") / "inc")


def _hostile(tmp: Path) -> Path:
    """The demo incident plus log lines carrying markup, as an attacker's prompt could."""
    inc = incident.generate()
    last = inc.decode[-1]
    room = 4242424242

    def line(msg: str, dt: int) -> Entry:
        return Entry(last.ts_us + dt, last.mono_us + dt, last.boot_id, last.host, last.unit,
                     last.ident, last.pid, msg)  # fmt: skip

    inc.decode += [
        line(f'forensics:checksum side=dst room={room} rid="{SCRIPT}" buf=index_k layer=all '
             f"tp=0 head=aa tail=bb full=cc", 10),
        line(f"[2026-11-29 07:00:09 TP0] Decode transfer failed for request rank=0 "
             f"decode_req.req.rid='x' decode_req.req.bootstrap_room={room} with exception "
             f"KVTransferError(bootstrap_room={room}): {IMG} {SCRIPT}", 20),
    ]  # fmt: skip
    files = [
        incident.write_export(inc.prefill, tmp / "prefill.export"),
        incident.write_export(inc.decode, tmp / "decode.export"),
        incident.write_results(inc.results, tmp / "results.jsonl"),
    ]
    db = tmp / "hostile.duckdb"
    forensics.ingest([str(f) for f in files], db, run="<b>run</b>")
    return db


# --- figure functions, on their data ------------------------------------------------


def test_timeline_traces_and_axes_of_the_demo(demo) -> None:
    fig = forensics.dashboards.timeline(demo.ingest.db, run="demo")  # the notebook API
    assert fig.layout.meta["panels"] == ["writes", "requests", "pages", "failures", "verdicts"]
    names = [t.name for t in fig.data]
    # one canary layer; bad-room outline, ok, corrupted; the heatmap; the failures (no
    # cascade: no first failure, no echoes); 7 verdicts, the corrupted requests at their
    # time, each host's load
    assert names == ["layer 30", "bad room (outline)", "ok", "corrupted", "page map",
                     "failures", "match", "partial", "stale", "mismatch", "conflict",
                     "missing_dst", "missing_src", "corrupted requests",
                     "#running-req decode-0"]  # fmt: skip
    ((n_fail,),) = forensics.query_rows(
        "SELECT count(*) FROM failures WHERE ts_us IS NOT NULL", demo.ingest.db)[1]  # fmt: skip
    assert len(fig.data[5].x) == n_fail > 0
    # the step axis spans the incident's steps: nothing is drawn at a step 0 it never had
    ((first,),) = forensics.query_rows("SELECT min(step) FROM steps", demo.ingest.db)[1]
    assert first > 0 and min(x for t in fig.data for x in t.x if x is not None) >= first
    assert fig.layout.meta["axis"] == "step"
    writes = fig.data[0]
    burst = demo.truth["burst_steps"]
    assert list(writes.x) == burst and list(writes.y) == [30] * len(burst)
    assert all(t.meta and len(t.meta["xt"]) == len(t.x) for t in fig.data)
    heat = fig.data[4]
    # the columns' edges: each step exactly one step wide
    assert list(heat.x) == [s - 0.5 for s in burst] + [burst[-1] + 0.5] and list(heat.y) == list(
        range(300 + burst[0] % 7, 333 + 3)
    )
    # every panel shares the first x axis: the burst lines up across them
    assert {fig.layout[a].matches for a in ("xaxis", "xaxis2", "xaxis3", "xaxis4")} == {"x5"}
    assert tuple(fig.layout.yaxis2.range) == (-1, 32)  # one row per request, all 32
    assert fig.layout.xaxis5.title.text == "decode step"
    corrupted = fig.data[3]
    steps = [x for x in corrupted.x if x is not None]
    assert min(steps) <= burst[0] and any(s >= burst[-1] for s in steps)


def test_without_step_records_the_axis_is_wall_time_alone_and_load_shows_its_range(
    tmp_path: Path,
) -> None:
    stock = forensics.demo(tmp_path / "stock", stock=True)
    fig = forensics.dashboards.timeline(stock.ingest.db)
    # no decode step to switch to: the x axis is the wall time alone, and no switch shown
    assert fig.layout.meta["axis"] == "time" and fig.layout.xaxis.type == "date"
    assert all(not t.meta for t in fig.data) and min(x for x in fig.data[0].x) > 1.7e12
    axis = [a for a in fig.layout if a.startswith("xaxis") and fig.layout[a].title.text]
    assert [fig.layout[a].title.text for a in axis] == ["wall time (UTC, each host's clock)"]
    assert 'data-mode="step"' not in stock.dashboard.path.read_text()
    load = panels.panels(forensics.connect_read_only(stock.ingest.db)).data["verdicts"].load
    assert (load["running_min"] <= load["running_req"]).all()
    assert (load["running_req"] <= load["running_max"]).all()


def test_runs_figure_has_wilson_error_bars(demo) -> None:
    fig = figures.runs_compared(demo.ingest.db)
    (bar,) = fig.data
    rate = len(demo.truth["corrupted"]) / 32
    assert list(bar.x) == ["demo"] and bar.y[0] == pytest.approx(100 * rate)
    assert bar.error_y.array[0] > 0 and bar.error_y.arrayminus[0] > 0


def test_point_budget_aggregates_and_says_so(demo, monkeypatch: pytest.MonkeyPatch) -> None:
    con = forensics.connect_read_only(demo.ingest.db)
    try:
        full = panels.panels(con)
        monkeypatch.setattr(data, "POINT_BUDGET", 2)
        monkeypatch.setattr(data, "REQUEST_BUDGET", 10)
        monkeypatch.setattr(data, "ROOM_BUDGET", 12)
        cut = panels.panels(con)
    finally:
        con.close()
    fw, cw = full.data["writes"], cut.data["writes"]
    assert fw.bin == 1 and len(fw.frame) == 3
    assert cw.bin == 2 and len(cw.frame) == 2  # 3 steps in bins of 2
    assert cw.frame["n_unexpected"].sum() == fw.frame["n_unexpected"].sum()
    assert cw.frame["records"].to_list() == [2, 1]
    full_req, cut_req = full.data["requests"], cut.data["requests"]
    corrupted = set(full_req.filter("corrupted")["rid"].to_list())
    assert len(cut_req) == 10 and corrupted <= set(cut_req["rid"].to_list())
    rooms, cut_rooms = full.data["verdicts"].rooms, cut.data["verdicts"].rooms
    bad = rooms.filter(rooms["verdict"] != "match")
    assert len(cut_rooms) <= 12 + len(bad) and set(bad["room"]) <= set(cut_rooms["room"])
    assert len(cut.notes) == 3 and "budget 2 points" in cut.notes[0]
    assert "10 of 32" in cut.notes[1] and "of 32 rooms" in cut.notes[2]
    monkeypatch.setattr(data, "REQUEST_BUDGET", 3)  # fewer than the corrupted ones
    con = forensics.connect_read_only(demo.ingest.db)
    try:
        few = panels.panels(con).data["requests"]
    finally:
        con.close()
    assert len(few) == 3 and few["corrupted"].all()
    assert few["first_step"].to_list() == sorted(few["first_step"].to_list())
    hover = panels.timeline_figure(cut).data[0].hovertext[0]
    assert hover.startswith("<b>steps ") and "(2 records)" in hover


def test_markup_from_logs_is_escaped_in_figures(tmp_path: Path) -> None:
    db = _hostile(tmp_path)
    fig = panels.timeline(db)
    texts = " ".join(
        str(h) for t in fig.data for h in (t.hovertext if t.hovertext is not None else []) if h
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in texts and "&lt;img src=x" in texts
    assert SCRIPT not in texts and "<img" not in texts
    assert "&lt;b&gt;run&lt;/b&gt;" in texts


def test_empty_panels_say_so_in_one_line(tmp_path: Path) -> None:
    inc = incident.generate()
    inc.decode = [e for e in inc.decode if "forensics:canary" not in str(e.message)]
    files = [incident.write_export(inc.decode, tmp_path / "decode.export")]
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(f) for f in files], db)
    res = dashboard(db, out=tmp_path / "d.html")
    assert res.panels == ["failures", "verdicts"]
    assert res.empty == [
        "Unexpected page writes: no canary records in these runs.",
        "Requests: no harness result could be placed on decode steps (no rid or room in common).",
        "Pairs: no judged request's prefill and decode hosts are both known.",
        "Spans: no OpenTelemetry span in a judged request's trace (ingest the collector's "
        "file exporter output; the trace must name the rid).",
    ]
    page = (tmp_path / "d.html").read_text()
    assert "Runs compared: no harness results." in page
    assert all(e in page for e in res.empty)


def test_cli_dashboard_prints_path_and_size(demo, tmp_path: Path) -> None:
    out = tmp_path / "sub" / "x.html"
    proc = cli("dashboard", "--db", str(demo.ingest.db), "--run", "demo", "--out", str(out))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().startswith(f"wrote {out} (") and out.stat().st_size > 1e6
    html = out.read_text()
    assert "<script src" not in html and "<link" not in html  # self-contained
    proc = cli("dashboard", "--db", str(demo.ingest.db), "--run", "nope", "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.decode().startswith("error: no run named 'nope'")


def test_open_without_a_browser_says_so(demo, tmp_path: Path) -> None:
    out = tmp_path / "o.html"
    # BROWSER names a command that fails: webbrowser finds no browser that opens it
    proc = cli("dashboard", "--db", str(demo.ingest.db), "--out", str(out), "--open",
               env={"BROWSER": "false", "DISPLAY": "", "WAYLAND_DISPLAY": ""})  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert f"no browser found here; open {out.resolve()}" in proc.stdout.decode().replace("\n", "")


# --- the page in a real browser ------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    # No skip: without chromium these tests must fail (see .ci/run).
    assert os.path.exists(CHROMIUM), "install Debian's chromium (see .ci/run)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


class Opened:
    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []


def _open(browser: Browser, path: Path, size: tuple[int, int] = (1600, 1000)) -> Opened:
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    page = ctx.new_page()
    o = Opened(page)

    def route(r) -> None:
        if r.request.url.startswith("file://"):
            r.continue_()
        else:  # the network is blocked; any attempt is recorded
            o.requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: o.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: o.errors.append(str(e)))
    page.on("dialog", lambda d: (o.dialogs.append(d.message), d.dismiss()))
    page.goto(path.resolve().as_uri())
    page.wait_for_function(
        "() => ['timeline', 'runs'].every(id => {"
        "  const gd = document.getElementById(id);"
        "  return gd && gd._fullLayout && gd.querySelector('.main-svg'); })"
    )
    return o


def test_demo_dashboard_draws_every_panel_offline(browser: Browser, demo, tmp_path: Path) -> None:
    o = _open(browser, demo.dashboard.path)
    page = o.page
    assert page.evaluate("document.getElementById('timeline').data.length") == 15
    assert page.evaluate("document.getElementById('runs').data.length") == 1
    titles = page.eval_on_selector_all(
        "#timeline .annotation-text", "es => es.map(e => e.textContent)"
    )
    timeline = [p.title for p in PANELS if p.timeline]
    assert [t for t in titles if t in timeline] == timeline
    # WebGL traces draw on canvases, the heatmap and bars into SVG.
    assert page.evaluate("document.querySelectorAll('#timeline canvas').length") > 0
    assert (
        page.evaluate(
            "document.querySelectorAll('#timeline .hm image, #timeline .heatmaplayer image').length"
        )
        == 1
    )
    assert page.evaluate("document.querySelectorAll('#runs .bars .point path').length") == 1
    assert page.evaluate("document.querySelectorAll('#rooms-table tbody tr').length") == 6
    assert page.evaluate("document.querySelectorAll('#steps-table tbody tr').length") == 3
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert o.errors == [] and o.requests == [] and o.dialogs == []


def test_hover_on_a_page_write_shows_step_and_layer(browser: Browser, demo) -> None:
    o = _open(browser, demo.dashboard.path)
    step = demo.truth["burst_steps"][0]
    x, y = o.page.evaluate(
        f"""() => {{
            const gd = document.getElementById('timeline');
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            const box = gd.getBoundingClientRect();
            return [box.left + xa._offset + xa.d2p({step}), box.top + ya._offset + ya.d2p(30)];
        }}"""
    )
    o.page.mouse.move(x, y)
    o.page.wait_for_selector("#timeline .hoverlayer .hovertext")
    text = o.page.eval_on_selector("#timeline .hoverlayer .hovertext", "e => e.textContent")
    assert f"step {step}, layer 30" in text and "unexpected 30" in text


def test_switching_the_axis_to_wall_time(browser: Browser, demo) -> None:
    o = _open(browser, demo.dashboard.path)
    o.page.click("button[data-mode=time]")
    o.page.wait_for_function(
        "document.getElementById('timeline')._fullLayout.xaxis.type === 'date'"
    )
    first = o.page.evaluate("document.getElementById('timeline').data[0].x[0]")
    assert first > 1.7e12  # ms since the epoch, decode's clock
    # every trace that has a time moved to it (numbers, not an undecoded typed array)
    firsts = o.page.evaluate(
        "document.getElementById('timeline').data.filter(t => t.meta && t.meta.xt)"
        ".map(t => t.x.find(v => v !== null))"
    )
    assert len(firsts) >= 2 and all(isinstance(v, float | int) and v > 1.7e12 for v in firsts)
    o.page.click("button[data-mode=step]")
    o.page.wait_for_function(
        "document.getElementById('timeline')._fullLayout.xaxis.type === 'linear'"
    )
    assert (
        o.page.evaluate("document.getElementById('timeline').data[0].x[0]")
        == demo.truth["burst_steps"][0]
    )
    assert o.errors == []


def test_markup_in_logs_shows_as_text_and_runs_nothing(browser: Browser, tmp_path: Path) -> None:
    db = _hostile(tmp_path)
    res = dashboard(db, out=tmp_path / "hostile.html")
    o = _open(browser, res.path)
    cells = o.page.eval_on_selector_all("#rooms-table td", "ts => ts.map(t => t.textContent)")
    assert SCRIPT in cells
    assert any(IMG in c and SCRIPT in c for c in cells)
    # plotly.js, the four figures (timeline, runs, suspects, templates) and the page's own
    # script: no seventh, no image
    assert o.page.evaluate("document.getElementById('suspects') !== null")
    assert o.page.evaluate("document.getElementById('templates') !== null")
    assert o.page.evaluate("document.scripts.length") == 6
    # the hostile line's template is drawn as text: its markup escaped in the labels
    labels = o.page.evaluate("document.getElementById('templates').data[0].y.join(' ')")
    assert "&lt;" in labels and "<script" not in labels and "<img" not in labels
    assert o.page.evaluate("document.querySelectorAll('img').length") == 0
    o.page.click("#rooms-table th:nth-child(3)")  # sorting re-inserts rows: still inert
    assert o.page.evaluate("document.querySelectorAll('img').length") == 0
    assert "&lt;b&gt;run&lt;/b&gt;" in o.page.content() and o.page.title().endswith("<b>run</b>")
    assert o.dialogs == [] and o.errors == [] and o.requests == []


def test_a_step_of_the_page_map_is_a_column_one_step_wide() -> None:
    """Seven single steps far apart were bands some 250 steps wide: each is now one step
    wide, the steps between them an empty column."""
    from forensics.dashboards.figures import _columns

    bins = pl.DataFrame({"step": [100, 350, 351, 600], "step_last": [100, 350, 351, 600],
                         "t_ms": [1.0, 2.0, 3.0, 4.0]})  # fmt: skip
    edges, times, columns = _columns(bins)
    assert len(edges) == len(columns) + 1 == len(times)
    widths = {c: edges[i + 1] - edges[i] for i, c in enumerate(columns) if c is not None}
    assert widths == {"100": 1.0, "350": 1.0, "351": 1.0, "600": 1.0}
    assert columns == ["100", None, "350", "351", None, "600"]


@pytest.fixture(scope="module")
def stock_two_hosts(tmp_path_factory: pytest.TempPathFactory):
    """The stock demo with a second decode host's load (the two were one zig-zag line)."""
    d = tmp_path_factory.mktemp("stock2")
    inc = forensics.demo(d / "inc", db=d / "s.duckdb", stock=True)
    other = d / "decode-1.log"
    other.write_text(
        "".join(
            f"[2026-11-29 07:00:0{i}] Decode batch, #running-req: {40 + i}, #token: 10, "
            "token usage: 0.10, gen throughput (token/s): 1.0, #queue-req: 0\n"
            for i in range(5)
        )
    )
    forensics.ingest([str(other)], d / "s.duckdb", run="demo", host="decode-1")
    out = forensics.dashboard(d / "s.duckdb", out=d / "board.html")
    return d / "s.duckdb", out.path, inc


def test_the_stock_page_shows_what_matters(browser: Browser, stock_two_hosts) -> None:
    db, path, inc = stock_two_hosts
    o = _open(browser, path, (1280, 800))
    page = o.page
    names = page.evaluate("document.getElementById('timeline').data.map(t => t.name)")
    corrupted = page.evaluate(
        "document.getElementById('timeline').data.filter(t => t.name === 'corrupted requests')"
        ".map(t => t.x.filter(x => x !== null).length)")  # fmt: skip
    assert corrupted == [len(inc.truth["corrupted"])] and corrupted[0] > 0
    loads = [n for n in names if n.startswith("#running-req") and not n.endswith("min–max")]
    assert loads == ["#running-req decode-0", "#running-req decode-1"]
    assert "failures" in names
    assert page.evaluate("document.getElementById('timeline')._fullLayout.xaxis.type") == "date"
    assert page.evaluate("document.querySelectorAll('.controls button').length") == 0
    banner = page.eval_on_selector_all(".verdict, .conclusion",
                                       "es => es.map(e => e.textContent)")  # fmt: skip
    rep = forensics.report(db)
    v = rep.verdict
    assert banner == [f"verdict ({v.kind.replace('_', ' ')}): {v.statement}", *rep.headline()[1:]]
    assert rep.headline()[0] == v.statement == rep.sentences()[0]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    ticks = page.evaluate(  # the load axis had one tick
        "(() => { const L = document.getElementById('timeline')._fullLayout;"
        "  const a = Object.keys(L).filter(k => /^yaxis\\d*$/.test(k))"
        "    .find(k => L[k].title && L[k].title.text === '#running-req');"
        "  return L[a]._vals.length; })()")  # fmt: skip
    assert ticks > 2
    assert o.errors == [] and o.requests == []


@pytest.fixture(scope="module")
def peer_loss(tmp_path_factory: pytest.TempPathFactory):
    """A planted peer loss on decode-1 (its remote agent lost, every later transfer there
    failing, echoes on prefill, fail-open corruption) and its dashboard."""
    from forensics.synthetic.planted import generate_planted, write_planted

    d = tmp_path_factory.mktemp("peer")
    inc = generate_planted(None, seed=0, requests=400, peer_loss=0.5)
    db = d / "p.duckdb"
    forensics.ingest([str(f) for f in write_planted(inc, d / "i")], db)
    return db, forensics.dashboard(db, out=d / "p.html"), inc


def test_the_first_failure_is_marked_and_its_echoes_drawn_fainter(peer_loss) -> None:
    db, res, inc = peer_loss
    assert res.panels == ["failures", "verdicts", "pairs"]
    fig = panels.timeline(db)
    by = {t.name: t for t in fig.data if t.name in ("failures", "first failure",
                                                    "echoes of the first failure")}  # fmt: skip
    first, echoes = by["first failure"], by["echoes of the first failure"]
    assert list(first.x) == [inc.truth["peer_loss_us"] / 1000]  # no steps: wall time alone
    assert list(first.y) == ["decode-1 TP0"] and first.marker.symbol == "star"
    assert "FIRST FAILURE: transfer NIXL_ERR_REMOTE_DISCONNECT" in first.hovertext[0]
    rep = forensics.report(db)
    assert len(echoes.x) == rep.first_failure.echoes
    assert echoes.marker.opacity < by["failures"].marker.opacity
    assert {y.split()[0] for y in echoes.y} == set(rep.first_failure.hosts)


def test_the_pairs_heat_map_puts_the_bad_pair_highest(peer_loss) -> None:
    db, _, _ = peer_loss
    p = panels.panels(db)
    (heat,) = panels.figure(p, "pairs").data
    top = forensics.report(db).pairs.pairs[0]
    row, col = heat.y.index(top.prefill_host), heat.x.index(top.decode_host)
    cells = [v for r in heat.z for v in r if v is not None]
    assert heat.z[row][col] == max(cells) == pytest.approx(100 * top.rate_low)
    assert len(cells) >= 2 and top.decode_host == "decode-1"
    assert heat.text[row][col] == f"{top.corrupted}/{top.requests}"


def test_no_page_table_is_wider_than_1280_px(browser: Browser, peer_loss, demo) -> None:
    for path in (peer_loss[1].path, demo.dashboard.path):
        o = _open(browser, path, (1600, 1000))
        widths = o.page.evaluate(
            "Array.from(document.querySelectorAll('table')).map("
            "t => [t.id, t.getBoundingClientRect().width])")  # fmt: skip
        assert all(w <= 1280 for _, w in widths), (path.name, widths)
        assert len(widths) == (2 if path == demo.dashboard.path else 0)  # the stock page: none
        assert o.page.evaluate("document.getElementById('pairs') !== null") == (
            path == peer_loss[1].path)  # fmt: skip
        assert o.errors == [] and o.requests == []
