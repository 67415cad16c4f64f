"""`forensics report`: the whole story on one screen, ending in bug-report sentences.

Coverage first (what the inputs are and what they miss: quarantined lines, journald's
rate-limit gaps), then the evidence (verdicts; what stock SGLang's own lines tell:
transfer failures, aborts, retractions, errors, load, and the flags for what is
missing; canary steps), then the conclusions (correlations, run comparison, skew).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..plural import counted
from ..scope import Db, Scope, scoped
from ..timefmt import span
from .canary import CanaryReport, canary
from .cascades import FirstFailure, first_failure
from .compare import Comparison, compare
from .correlate import Correlation, correlate
from .failopen import FailOpen, fail_open
from .flight import Flight, flight
from .integrity import Integrity, integrity
from .onset import Onset, onset
from .pairs import Pairs, pairs
from .rooms import RoomsReport, rooms
from .runs import Runs
from .skew import Skew, skew
from .stock import StockEvidence, stock
from .suspects import Suspects, suspects
from .verdict import Verdict, decide

SUPPRESSED = r"^Suppressed (\d+) messages from (\S+)"


@dataclass
class HostCoverage:
    host: str | None
    entries: int
    first_ts_us: int | None
    last_ts_us: int | None


@dataclass
class Gap:
    """journald dropped messages over its rate limit: evidence may be missing here."""

    host: str | None
    ts_us: int | None
    suppressed: int
    unit: str


@dataclass
class Coverage:
    runs: dict[str, dict[str, str]]  # run -> tags
    sources: int
    results: int  # harness result rows
    hosts: list[HostCoverage]
    quarantined: int
    quarantine_reasons: list[tuple[str, int]]
    gaps: list[Gap]
    window: dict[str, str | None] | None = None  # --since/--until (None: everything)
    span: tuple[int | None, int | None] | None = None  # the whole incident's, when windowed
    untimed: int = 0  # entries with no time: the time-based analyses leave them out

    def sentences(self) -> list[str]:
        hosts = ", ".join(h.host or "?" for h in self.hosts)
        n = sum(h.entries for h in self.hosts)
        if self.window is not None and not n and not self.results:
            w = " ".join(f"{k} {v}" for k, v in self.window.items() if v)
            whole = span(*self.span) if self.span and self.span[0] is not None else "no time"
            return [f"nothing happened in the window ({w}): the incident spans {whole}"]
        first = min((h.first_ts_us for h in self.hosts if h.first_ts_us), default=None)
        last = max((h.last_ts_us for h in self.hosts if h.last_ts_us), default=None)
        within = ""
        if self.window is not None:
            within = " in the window" + "".join(f" {k} {v}" for k, v in self.window.items() if v)
        out = [
            f"inputs{within}: {counted(n, 'journal entry', 'journal entries')} from "
            f"{counted(len(self.hosts), 'host')} ({hosts}), {span(first, last)}; "
            f"{counted(self.results, 'harness result')}; "
            f"{counted(self.sources, 'source')}"
        ]
        if len(self.hosts) > 1:
            out.append(
                "per host: "
                + "; ".join(
                    f"{h.host or '?'} {counted(h.entries, 'entry', 'entries')}, "
                    f"{span(h.first_ts_us, h.last_ts_us)}"
                    for h in self.hosts
                )
            )
        if self.untimed:
            out.append(f"{counted(self.untimed, 'entry', 'entries')} with no time (none of "
                       "their own, none before them in their source) are left out of the "
                       "failures, cascades, onset, timeline, trace and dashboard")  # fmt: skip
        if self.quarantined:
            top = self.quarantine_reasons[0]
            out.append(f"{counted(self.quarantined, 'line')} quarantined "
                       f"(most: {top[1]:,} × {top[0]})")  # fmt: skip
        else:
            out.append("no input line was quarantined")
        if self.gaps:
            total = sum(g.suppressed for g in self.gaps)
            where = ", ".join(sorted({f"{g.host}/{g.unit}" for g in self.gaps}))
            gaps = f"{len(self.gaps)} gap{'s' if len(self.gaps) > 1 else ''}"
            out.append(
                f"journald suppressed {total:,} messages ({gaps}: {where}): "
                f"records from those windows may be missing"
            )
        return out


@dataclass
class Report:
    run: Runs
    coverage: Coverage
    rooms: RoomsReport
    correlation: Correlation
    comparison: Comparison
    skew: Skew
    canary: CanaryReport
    stock: StockEvidence
    suspects: Suspects
    onset: Onset
    pairs: Pairs
    fail_open: FailOpen
    first_failure: FirstFailure | None
    integrity: Integrity
    flight: Flight
    verdict: Verdict

    def as_dict(self) -> dict:
        return {
            "run": self.run,
            "verdict": self.verdict.as_dict(),
            "coverage": asdict(self.coverage),
            "rooms": self.rooms.as_dict(),
            "correlation": self.correlation.as_dict(),
            "comparison": self.comparison.as_dict(),
            "skew": self.skew.as_dict(),
            "canary": self.canary.as_dict(),
            "stock": self.stock.as_dict(),
            "suspects": self.suspects.as_dict(),
            "onset": self.onset.as_dict(),
            **self.pairs.as_dict(),
            "fail_open": self.fail_open.as_dict(),
            "first_failure": self.first_failure.as_dict() if self.first_failure else None,
            "integrity": self.integrity.as_dict(),
            "flight_recorder": self.flight.as_dict(),
            "headline": self.headline(),
            "conclusions": self.sentences(),
        }

    def headline(self) -> list[str]:
        """The verdict and its evidence, first in the report, the dashboard's banner and
        the bundle's README: its statement, the rank the others waited on (the Flight
        Recorder), the impact, the next experiment, the runners-up; without harness
        results, that there are none."""
        return headline(self)

    def _suspect_is_verdict(self) -> bool:
        v, top = self.verdict, self.suspects.found()[:1]
        return bool(top) and v.kind not in ("failure_cascade", "onset", "config", "none") and (
            v.p == top[0].table.p_value)  # fmt: skip

    def _onset_sentences(self) -> list[str]:
        """The onset's, each time said as what it is beside the verdict: the verdict's own
        (left out: the statement said it; narrowed by a failure, no load change disowns
        it), or the scan's change point the verdict explains."""
        v, o = self.verdict, self.onset
        if v.kind == "onset":
            return o.sentences("the verdict", marked=v.interval_us != list(o.ci_us or ()))
        return o.sentences(f"the {v.kind.replace('_', ' ')} verdict explains it"
                           if v.kind != "none" else "no verdict")  # fmt: skip

    def sentences(self) -> list[str]:
        """What an engineer pastes into the bug report, the headline first, each sentence
        once (sections that follow the same runs say so each)."""
        return list(dict.fromkeys([
            *self.headline(),
            *self.coverage.sentences(),
            *self.rooms.sentences(),
            *self.stock.sentences(),
            *self.correlation.sentences(),
            *self.suspects.sentences(headline=self._suspect_is_verdict()),
            *self._onset_sentences(),
            *self.pairs.sentences(),
            *self.fail_open.sentences(),
            *self.integrity.sentences(),
            *self.flight.sentences(),
            *self.comparison.sentences(),
            *self.canary.sentences(),
            *self.skew.sentences(),
        ]))  # fmt: skip


def headline(rep: Report) -> list[str]:
    """See Report.headline."""
    v = rep.verdict
    if v.kind == "none" and not rep.coverage.hosts and rep.coverage.window is not None:
        return [v.statement, *rep.coverage.sentences()[:1]]  # an empty window: the span
    return [v.statement, *rep.flight.sentences()[:1], *v.evidence()]


def verdict(db: Db = None, run: Runs = None) -> Verdict:
    """The one hypothesis that explains the incident (forensics/analyses/verdict.py), as
    `report` prints it first: kind, statement, where, when, p, known cause, impact, the
    next experiment and the others."""
    return report(db, run).verdict


def report(db: Db = None, run: Runs = None, top: int = 5) -> Report:
    """Every section over one scope; kept on it, so the dashboard and the bundle reuse it."""
    with scoped(db, run) as s:
        return s.memo(("report", tuple(s.runs), top), lambda: _report(s, top))


def _report(s: Scope, top: int) -> Report:
    found = (correlate(s), suspects(s), onset(s), first_failure(s))
    return Report(
        s.run,
        coverage(s),
        rooms(s, limit=top),
        found[0],
        compare(s),
        skew(s),
        canary(s, top=top),
        stock(s),
        found[1],
        found[2],
        pairs(s),
        fail_open(s),
        found[3],
        integrity(s),
        flight(s),
        decide(s, found[3], found[2], found[1], found[0]),
    )


def coverage(s: Scope) -> Coverage:
    con, tags, chosen = s.con, s.tags, s.runs
    where, params = s.where("s.run")
    hosts = [
        HostCoverage(*r)
        for r in con.execute(
            f"""SELECT e.host, count(*), min(e.ts_us), max(e.ts_us)
                FROM entries e JOIN sources s USING (source_id) WHERE {where}
                GROUP BY ALL ORDER BY e.host NULLS LAST""",
            params,
        ).fetchall()
    ]
    reasons = con.execute(
        f"""SELECT q.reason, count(*) FROM quarantine q JOIN sources s USING (source_id)
            WHERE {where} GROUP BY ALL ORDER BY count(*) DESC, q.reason LIMIT 5""",
        params,
    ).fetchall()
    nq, nsrc = con.execute(
        f"""SELECT (SELECT count(*) FROM quarantine q JOIN sources s USING (source_id)
                    WHERE {where}),
                   (SELECT count(*) FROM sources s WHERE {where})""",
        params * 2,
    ).fetchall()[0]
    gaps = [
        Gap(*r)
        for r in con.execute(
            f"""SELECT e.host, e.ts_us, CAST(regexp_extract(e.message, ?, 1) AS BIGINT),
                       regexp_extract(e.message, ?, 2)
                FROM entries e JOIN sources s USING (source_id)
                WHERE {where} AND e.message LIKE 'Suppressed % messages from %'
                  AND regexp_matches(e.message, ?)
                ORDER BY e.ts_us""",
            [SUPPRESSED, SUPPRESSED, *params, SUPPRESSED],
        ).fetchall()
    ]
    rwhere, rparams = s.where()
    results = con.execute(f"SELECT count(*) FROM results WHERE {rwhere}", rparams).fetchall()
    return Coverage({r: tags[r] for r in chosen}, nsrc, results[0][0], hosts, nq, reasons, gaps,
                    s.window, s.span_us, s.untimed())  # fmt: skip
