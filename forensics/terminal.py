"""Analysis results as terminal tables and sentences (the CLI's and the demo's text)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.table import Table

from .analyses.canary import page_ranges
from .analyses.stats import fmt_num, fmt_p, fmt_pct
from .statuses import SEVERITY
from .timefmt import iso_us

if TYPE_CHECKING:
    from .analyses.canary import CanaryReport
    from .analyses.compare import Comparison
    from .analyses.correlate import Correlation
    from .analyses.follow import Follow
    from .analyses.report import Report
    from .analyses.rooms import RoomsReport
    from .analyses.skew import Skew
    from .analyses.suspects import Suspects
    from .analyses.suspects.rank import Suspect
    from .analyses.templates import Shown, Templates
    from .experiment import ExperimentResult
    from .repro import ReproResult, RunStats


def rooms(con: Console, r: RoomsReport, sentences: bool = True) -> None:
    for line in r.followed:
        con.print(line, highlight=False, markup=False)
    if not r.counts:
        if sentences:
            _sentences(con, r.sentences())
        return
    verdicts = sorted({v for c in r.counts.values() for v in c}, key=SEVERITY.index)
    t = Table(title="verdicts per run", title_justify="left")
    t.add_column("run")
    for v in verdicts:
        t.add_column(v, justify="right")
    for run, c in r.counts.items():
        t.add_row(run, *(str(c.get(v, 0)) for v in verdicts))
    con.print(t)
    if sentences:
        _sentences(con, r.received_sentences())
    if not r.worst:
        con.print("no rooms to list")
        return
    w = Table(title="worst rooms", title_justify="left")
    for c in (
        "run",
        "verdict",
        "room",
        "rid",
        "dst host",
        "dst time",
        "stale_of",
        "transfer events",
    ):
        w.add_column(c)
    for row in r.worst:
        w.add_row(
            row["run"], row["verdict"], str(row["room"]), row["rid"] or "-",
            row["dst_host"] or "-", iso_us(row["dst_ts_us"]),
            str(row["stale_of"]) if row["stale_of"] is not None else "-",
            row["transfer_reasons"] or "-",
        )  # fmt: skip
    con.print(w)


def correlation(con: Console, c: Correlation, sentences: bool = True) -> None:
    t = Table(
        title=f"exposure × corrupted ({', '.join(c.runs)}: {c.requests} requests, "
        f"{c.corrupted} corrupted)",
        title_justify="left",
    )
    for col in ("exposure", "corrupted / with", "corrupted / without", "RR", "OR",
                "exact 95 % CI", "Fisher p"):  # fmt: skip
        t.add_column(col)
    for a in c.associations:
        x = a.table
        t.add_row(
            a.label, f"{x.exposed_cases}/{x.exposed_total}", f"{x.control_cases}/{x.control_total}",
            fmt_num(x.relative_risk), fmt_num(x.odds_ratio),
            f"{fmt_num(x.or_low)}–{fmt_num(x.or_high)}", fmt_p(x.p_value),
        )  # fmt: skip
    con.print(t)
    if sentences:
        _sentences(con, c.sentences())


def suspects(con: Console, r: Suspects, top: int = 15, sentences: bool = True) -> None:
    """The ranking, one line per group, best first; then the sentences (known causes and
    the next experiment for the top ones)."""
    k = r.ranking
    lines = r.lines()
    if lines:
        t = Table(title=f"suspects ({', '.join(r.runs)}: {k.requests:,} judged requests, "
                        f"{k.corrupted:,} corrupted; {len(k.tested)} predicates tested, "
                        f"{r.method} q)", title_justify="left")  # fmt: skip
        # a narrow terminal gets the counts, the ratio, q and the verdict (--json: all)
        wide = con.width >= WIDE_SUSPECTS
        cols = SUSPECT_COLUMNS if wide else ("#", "predicate", "with", "without", "RR", "q",
                                             "verdict")  # fmt: skip
        for col in cols:
            if col == "predicate":
                t.add_column(col, min_width=30, ratio=1)
            else:
                t.add_column(col, no_wrap=True, justify="right" if col != "verdict" else "left")
        for s in lines[:top]:
            cells = _suspect_cells(s)
            t.add_row(*(cells[c] for c in cols))
        con.print(t)
        if len(lines) > top:
            con.print(f"… {len(lines) - top} more lines (--top, or --json for all)")
    if sentences:
        _sentences(con, r.sentences())


WIDE_SUSPECTS = 140  # columns the suspects' whole table needs
SUSPECT_COLUMNS = ("#", "predicate", "with", "without", "RR", "OR (exact 95 % CI)", "p", "q",
                   "covers", "MH OR, p", "verdict")  # fmt: skip


def _suspect_cells(s: Suspect) -> dict[str, str]:
    """One suspect's cells by column (SUSPECT_COLUMNS)."""
    from .analyses.stats import fmt_ci

    x = s.table
    alike = f" (+{len(s.members)} alike)" if s.members else ""
    strat = s.stratified
    # the pooled ratio beside its p: a verdict within the strata (less, masked) follows
    # from it, not from the crude OR
    mh = ("-" if strat is None or strat.p is None
          else f"{fmt_num(strat.odds_ratio)}, {_bare(fmt_p(strat.p))}")  # fmt: skip
    odds = "-"
    if x.has_odds_ratio:
        ci = fmt_ci(x.or_low, x.or_high).removeprefix("95 % CI ")
        odds = f"{fmt_num(x.odds_ratio)} ({ci})"
    return dict(zip(SUSPECT_COLUMNS, (
        str(s.group), s.predicate + alike, f"{x.exposed_cases}/{x.exposed_total}",
        f"{x.control_cases}/{x.control_total}", fmt_num(x.relative_risk), odds,
        _bare(fmt_p(x.p_value)), _bare(fmt_p(s.q, "q")), str(s.covers), mh, s.verdict),
        strict=True))  # fmt: skip


def _bare(p: str) -> str:
    """ "p = 0.03" → "0.03", "q < 1e-6" → "< 1e-6": the column names the statistic."""
    return p.split(" ", 1)[1].removeprefix("= ")


def comparison(con: Console, c: Comparison) -> None:
    if not c.rates:
        con.print("→ no harness results: no corruption rate to compare")
        return
    t = Table(title="corruption rate per run (Wilson 95 %)", title_justify="left")
    shared, own = c.tag_split()
    for col in ("run", "tags" if len(c.rates) < 2 else "tags that differ", "requests",
                "corrupted", "rate", "95 % CI", "failed"):  # fmt: skip
        t.add_column(col)
    if len(c.rates) < 2:  # the server's arguments matter where they differ, not in a list
        shared, own = {k: v for k, v in own[0].items() if k.startswith("server.")}, [
            {k: v for k, v in own[0].items() if not k.startswith("server.")}]  # fmt: skip
    for r, tags in zip(c.rates, own, strict=True):
        text = " ".join(f"{k}={v}" for k, v in tags.items()) or "-"
        t.add_row(r.run, text, str(r.requests), str(r.corrupted), fmt_pct(r.rate),
                  f"{fmt_pct(r.low)}–{fmt_pct(r.high)}", str(r.failed))  # fmt: skip
    con.print(t)
    server = sum(k.startswith("server.") for k in shared)
    if len(shared) > server:
        con.print("same in every run: " + " ".join(f"{k}={v}" for k, v in shared.items()
                                                   if not k.startswith("server.")))  # fmt: skip
    if server:
        one = len(c.rates) < 2
        con.print(f"the server's {server} arguments are in the run's tags" if one
                  else f"the server's other {server} arguments: the same in every run")  # fmt: skip
    if any(r.failed for r in c.rates):
        con.print(
            "requests: with a reply to judge; failed (http_error, timeout) are not in the rate"
        )
    if c.without_results:
        con.print(f"runs without harness results: {', '.join(c.without_results)}")
    if not c.pairs:
        con.print("one run with results: nothing to compare")
    _sentences(con, c.sentences())


def follow(con: Console, f: Follow) -> None:
    rooms = ", ".join(map(str, f.rooms)) or "none"
    ids = (
        [f"{f.key}: rids {', '.join(f.rids) or 'none'}; rooms {rooms}"] if f.summary is None else []
    )
    _sentences(con, [f.headline(), *ids, f.clock])
    for h in f.harness:
        con.print(f"  harness: run {h['run']} session {h['session']} round {h['round']}, "
                  f"sent {iso_us(h['start_us'])}")  # fmt: skip
    t = Table(title=f"{len(f.lines)} lines in time order", title_justify="left")
    for col in ("time", "host", "message"):
        t.add_column(col, overflow="fold")
    for ln in f.lines:
        shifted = "" if ln.ts_us == ln.raw_ts_us else " *"
        mark = " +" if ln.about == "around" else ""
        t.add_row(iso_us(ln.ts_us) + shifted + mark, ln.host or "-", ln.message)
    con.print(t)
    if any(ln.ts_us != ln.raw_ts_us for ln in f.lines):
        con.print("  * shifted onto decode's clock (logged time in --json: raw_ts_us)")
    if f.around_s is not None:
        n = sum(ln.about == "around" for ln in f.lines)
        con.print(f"  + {n} other events on these hosts within {f.around_s:g} s")
    if f.folded:
        con.print(f"  {f.folded:,} step records folded into ranges (--all lists each)")
    if f.truncated:
        con.print(f"  … more lines than {len(f.lines):,}: the first shown")


def templates(con: Console, t: Templates) -> None:
    from .analyses.templates import describe
    from .clip import clip
    from .parsers.templates import MAX_TEXT

    _sentences(con, t.sentences())
    table = Table()
    for col in ("template", "level", "component", "lines", "hosts", "text"):
        table.add_column(col, overflow="fold")
    for x in t.templates:
        hosts = ", ".join(f"{h or '-'} {n:,}" for h, n in x.hosts.items())
        # a text at the masker's cap was cut there: said with an ellipsis, at a word
        text = clip(x.text, MAX_TEXT, cut=len(x.text) >= MAX_TEXT) if x.text else None
        table.add_row(f"{x.template:016x}", x.level or "-", x.component or "-", describe(x),
                      hosts, text or "(text not kept)")  # fmt: skip
    con.print(table)
    for n in t.notes:
        con.print(n)


def skew(con: Console, s: Skew) -> None:
    _sentences(con, s.sentences())


def canary(con: Console, c: CanaryReport, sentences: bool = True) -> None:
    if c.steps:
        t = Table(title="steps with unexpected page writes", title_justify="left")
        for col in ("run", "host", "step", "time", "layer", "expected", "changed",
                    "unexpected", "pages", "batch", "corrupted"):  # fmt: skip
            t.add_column(col)
        for s in c.steps:
            for i, lw in enumerate(s.layers):
                first = i == 0
                t.add_row(
                    s.run if first else "", s.host or "-" if first else "",
                    str(s.step) if first else "", iso_us(s.ts_us) if first else "",
                    str(lw.layer), str(lw.n_expected), str(lw.n_changed), str(lw.n_unexpected),
                    page_ranges(lw.pages), str(len(s.rids)) if first else "",
                    str(s.corrupted) if first else "",
                )  # fmt: skip
        con.print(t)
    if sentences:
        _sentences(con, c.sentences())


def report(con: Console, r: Report) -> None:
    """The verdict and its evidence first (the headline), then each section's table, then
    the rest of the bug-report sentences: each line printed once."""
    runs = r.run if isinstance(r.run, str) else ", ".join(r.run or [])
    con.rule(f"report{' — ' + runs if runs else ''}")
    head = r.headline()
    v = r.verdict
    for i, line in enumerate(head):
        if i == 0 and line == v.statement:
            con.print(f"verdict ({v.kind.replace('_', ' ')}): {line}")
        else:
            con.print(f"  {line}")
    rooms(con, r.rooms, sentences=False)
    if any(a.table.exposed_total and a.table.control_total for a in r.correlation.associations):
        correlation(con, r.correlation, sentences=False)
    suspects(con, r.suspects, top=5, sentences=False)
    if len(r.comparison.rates) > 1:
        comparison(con, r.comparison)
    canary(con, r.canary, sentences=False)
    con.rule("for the bug report (the verdict above first)")
    for s in r.sentences()[len(head) :]:
        con.print(f"- {s}")


def _sentences(con: Console, lines: list[str]) -> None:
    for s in lines:
        con.print(f"→ {s}")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def repro_table(runs: list[RunStats], title: str = "forensics repro") -> Table:
    """One row a run: progress, corruption rate with its Wilson interval, failures, speed."""
    t = Table(title=title, title_justify="left")
    for col in ("run", "sessions", "rounds", "requests", "corrupted", "rate (95 % CI)",
                "failed", "truncated", "req/s", "p50", "p99"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("run", "rate (95 % CI)") else "right")
    for r in runs:
        rate, low, high = r.rate()
        failed = ", ".join(f"{k} {r.statuses[k]}" for k in ("http_error", "timeout")
                           if r.statuses[k]) or "0"  # fmt: skip
        t.add_row(
            r.run + (" (interrupted)" if r.interrupted else ""), str(r.sessions),
            f"{r.rounds_done}/{r.rounds_total}", f"{r.requests:,}", f"{r.corrupted:,}",
            f"{fmt_pct(rate)} ({fmt_pct(low)}–{fmt_pct(high)})", failed,
            str(r.statuses["truncated"]), f"{r.per_second():,.0f}",
            _ms(r.latency_ms(0.5)), _ms(r.latency_ms(0.99)),
        )  # fmt: skip
    return t


class ReproLive:
    """The live table of `forensics repro` (a terminal only), redrawn on each report."""

    def __init__(self, con: Console) -> None:
        self.runs: dict[str, RunStats] = {}
        self.live = Live(repro_table([]), console=con, auto_refresh=False, transient=True)

    def __enter__(self) -> ReproLive:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def update(self, stats: RunStats) -> None:
        self.runs[stats.run] = stats
        self.live.update(repro_table(list(self.runs.values())), refresh=True)


def repro(con: Console, r: ReproResult) -> None:
    con.print(repro_table(r.runs, f"forensics repro → {r.out}"))
    reasons: dict[str, int] = {}
    for run in r.runs:
        for k, v in run.reasons.items():
            reasons[k] = reasons.get(k, 0) + v
    if reasons:
        con.print("reasons: " + ", ".join(f"{k} {v:,}" for k, v in sorted(reasons.items())))
    if r.interrupted:
        con.print(f"→ interrupted: every finished request is in {r.out}")
    con.print(f"→ next: forensics ingest <journals> {r.out}, then forensics compare / correlate")


EPOCH_US_MIN = 10**14  # µs since the epoch from 1973 on: a time, not a duration


def result_table(cols: list[str], rows: list[tuple]) -> Table:
    """Rows of a query for the terminal: every value whole (long ids fold onto a second
    line rather than end in …), epoch µs columns (`*_us`) as UTC text."""
    t = Table()
    for c in cols:
        t.add_column(c, overflow="fold")
    times = [c.endswith("_us") for c in cols]
    for r in rows:
        t.add_row(*(_cell(v, is_time) for v, is_time in zip(r, times, strict=True)))
    return t


def _cell(v, is_time: bool) -> str:
    if v is None:
        return "NULL"
    if is_time and isinstance(v, int) and v >= EPOCH_US_MIN:
        return iso_us(v)
    return str(v)


def template_values(con: Console, r: Shown) -> None:
    """A template's named values: each name, the lines naming it, distinct values, the top."""
    from .plural import counted

    t = Table(title=f"template {r.template:016x}: {r.text} ({counted(r.lines, 'line')})",
              title_justify="left")  # fmt: skip
    for col in ("name", "lines", "distinct", "most frequent (lines)"):
        t.add_column(col, overflow="fold")
    for v in r.values:
        top = ", ".join(f"{value} ({n:,})" for value, n in v.top)
        more = f" … {v.distinct - len(v.top):,} more" if v.distinct > len(v.top) else ""
        t.add_row(v.name, f"{v.lines:,}", f"{v.distinct:,}", top + more)
    con.print(t)
    if not r.values:
        con.print("its lines name no values", markup=False, highlight=False)


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.2%}"


def _schedule(con: Console, r: ExperimentResult) -> None:
    """--dry-run: one cycle of blocks, then how many the budget allows and the worst case."""
    assert r.schedule is not None and r.summary is not None
    t = Table(title=f"experiment {r.verb}: the schedule (--dry-run)", title_justify="left")
    for col in ("block", "arm", "flags and environment", "requests judged", "worst case"):
        t.add_column(col)
    for b in r.schedule:
        lo, hi = b["requests"]
        t.add_row(str(b["block"]), b["arm"], b["change"], f"{lo:,}–{hi:,}" if hi > lo
                  else f"{lo:,}", f"{b['worst_case_s']:,.0f} s")  # fmt: skip
    con.print(t)
    s = r.summary
    lo, hi = s["blocks"]
    many = f"{lo:,}–{hi:,}" if hi > lo else f"{hi:,}"
    con.print(f"… the cycle repeats: {many} blocks for the budget of {s['budget']:,} requests "
              f"(a round is a user turn and its tool calls, each a judged request); worst "
              f"case {s['worst_case_s'] / 3600:,.1f} h", markup=False, highlight=False)  # fmt: skip


def experiment(con: Console, r: ExperimentResult) -> None:
    """The decision first, then the arms' counts, the blocks and (minimize) its tests."""

    def say(text: str) -> None:
        con.print(text, markup=False, highlight=False)

    if r.schedule is not None:
        _schedule(con, r)
        return
    ci = ""
    if r.ci is not None:
        hi = "∞" if r.ci[1] is None else fmt_num(r.ci[1])
        ci = f"; RR {fmt_num(r.rr)}, always-valid {fmt_num(r.ci[0])}–{hi}, p {fmt_num(r.p)}"
    say(f"experiment {r.verb}: {r.decision}{ci} ({r.why or r.error or ''})")
    for note in r.notes:
        say(f"note: {note}")
    if r.arms:
        t = Table(title=f"{r.name}: {len(r.blocks)} blocks in {r.out}", title_justify="left")
        # ab decides on sessions (a session is corrupted when any reply is): its rates
        # beside the requests', or an equivalence margin reads against the wrong ones
        for col in ("arm", "flags", "judged", "corrupted", "rate", "sessions", "corrupted ",
                    "session rate", "no reply"):  # fmt: skip
            t.add_column(col)
        for a in r.arms:
            t.add_row(a["name"], a["flags"] or "-", f"{a['requests']:,}", f"{a['corrupted']:,}",
                      _pct(a["rate"]), f"{a['sessions']:,}", f"{a['sessions_corrupted']:,}",
                      _pct(a["session_rate"]), f"{a['no_reply']:,}")  # fmt: skip
        con.print(t)
        if r.verb == "ab" and r.ci is not None:
            say("the test decides on session rates: RR and its interval are theirs")
    for test in r.tests:
        say(f"  test {' '.join(test['flags']) or '(no flags)'}: {test['decision']} "
                  f"({test['requests']:,} judged requests)")  # fmt: skip
    if r.subset is not None:
        say(f"minimal failing flags: {' '.join(r.subset) or '(none)'}"
                  f"{'' if r.one_minimal else ' (not confirmed 1-minimal)'}")  # fmt: skip
    if r.needed:
        say(f"a decision would need about {r.needed:,} judged requests an arm")
