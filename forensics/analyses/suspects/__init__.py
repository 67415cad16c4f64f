"""`forensics suspects`: every recorded factor ranked by its association with corruption.

The factors (features.toml) come from the `request_features` view: the harness's own
fields, stock SGLang's evidence about each request and the probes' where there are
some; over several runs, their tags and server arguments too. Each is turned into
yes/no predicates (predicates.py), tested and ranked (rank.py) and matched against the
known causes (causes.toml) with the experiment that tells each apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import duckdb

from ...errors import ForensicsError
from ...plural import counted
from ...scope import Db, Runs, Scope, scoped
from ..stats import ALPHA, fmt_ci, fmt_num, fmt_p, requests_needed
from .causes import known_causes
from .features import Feature, Table, declared, load_table
from .headline import Headline, headline, request_rows
from .named_levels import named_levels
from .nearby import GRID_S, near, template_of
from .predicates import Predicate, Skipped
from .rank import AFTER, LOAD, MASKED, REVERSED, SUSPECT, Ranking, Suspect, rank
from .stored import read_stored

ALIKE = 3  # a suspect's alike predicates a sentence names (the rest: "+N more")


@dataclass
class Suspects:
    runs: list[str]
    fdr: float
    method: str  # Benjamini–Hochberg | Benjamini–Yekutieli
    min_support: int
    ranking: Ranking
    left_out: dict[str, int]  # requests with no outcome: why -> count
    missing_evidence: list[dict[str, str]]  # factors no request has: feature, needs
    peers: dict[str, int] = field(default_factory=dict)  # corrupted requests' peers' outcomes
    headline: Headline | None = None
    # the judged requests and each one's run, session, rid and send time (headline.py's
    # request_rows), for the analyses that weigh a suspect against others (the verdict)
    table: Table | None = field(default=None, repr=False, compare=False)
    rows: dict | None = field(default=None, repr=False, compare=False)

    @property
    def suspects(self) -> list[Suspect]:
        return self.ranking.tested

    def lines(self) -> list[Suspect]:
        """One predicate per group, the best-ranked: the ranking's lines."""
        seen: set[int] = set()
        out = []
        for s in self.suspects:
            if s.group not in seen:
                seen.add(s.group)
                out.append(s)
        return out

    def found(self) -> list[Suspect]:
        """The lines that pass as suspects."""
        return [s for s in self.lines() if s.verdict == SUSPECT]

    def as_dict(self) -> dict:
        r = self.ranking
        return {
            "runs": self.runs, "fdr": self.fdr, "method": self.method,
            "min_support": self.min_support, "requests": r.requests, "corrupted": r.corrupted,
            "tested": len(r.tested), "suspects": [s.as_dict() for s in r.tested],
            "screened_out": [s.as_dict() for s in r.screened_out],
            "not_factors": [{"feature": s.feature, "why": s.why} for s in r.skipped],
            "left_out": self.left_out, "missing_evidence": self.missing_evidence,
            "load_strata": [{"concurrency_from": lo, "concurrency_to": hi, "requests": n}
                            for lo, hi, n in r.strata],
            "peers": self.peers, "requests_needed": self.requests_needed(),
            "headline": self.headline.as_dict() if self.headline else None,
            "conclusions": self.sentences(),
        }  # fmt: skip

    def top_experiment(self) -> Suspect | None:
        """The suspect whose experiment the sentences print (`--plan` writes the
        verdict's: analyses/verdict.py)."""
        return next((s for s in self.found() if s.experiment), None)

    def strongest(self) -> Suspect | None:
        """The candidate cause with the smallest p (a line after the transfer is none)."""
        causes = [s for s in self.suspects if not s.after]
        return min(causes, key=lambda s: s.table.p_value or 1.0) if causes else None

    def requests_needed(self) -> int | None:
        """Nothing passes: requests per group that would tell the strongest candidate's
        two rates apart (as `compare` says for two runs)."""
        best = None if self.found() else self.strongest()
        if best is None:
            return None
        t = best.table
        return requests_needed(t.exposed_cases / t.exposed_total, t.control_cases / t.control_total)

    def _none_found(self, how: str) -> str:
        r, needed, more = self.ranking, self.requests_needed(), ""
        if needed and (best := self.strongest()) is not None:
            more = (
                f"; the strongest, {best.predicate} ({_counts(best)}, "
                f"{fmt_p(best.table.p_value)}), would need about {needed:,} requests "
                "with it and as many without to tell apart"
            )
        return (f"suspects: insufficient evidence — no factor passes over {r.requests:,} "
                f"judged requests ({r.corrupted:,} corrupted); {how}{more}")  # fmt: skip

    def _findings(self, how: str) -> list[str]:
        r, found = self.ranking, self.found()
        out = [f"suspects: {len(found)} factor{'s' if len(found) > 1 else ''} "
               f"associated with corruption over {r.requests:,} judged requests "
               f"({r.corrupted:,} corrupted); {how}"]  # fmt: skip
        out += [describe(s, r.corrupted) for s in found[:3]]
        top = self.top_experiment()
        if found[0] is not top:
            out.append(_no_experiment(found[0], top))
        if top and (done := top.experiment.get("already_run")):
            e, here = top.experiment, ", ".join(done)
            out.append(f"the experiment for {top.known_causes[0]} is already here: run {here} "
                       f"({e['toggle']}); `forensics compare {self.runs[0]} {done[0]}` "
                       f"settles it — if it is the cause, {e['if_cause']}")  # fmt: skip
        elif top:
            e = top.experiment
            out.append(f"next experiment ({top.known_causes[0]}): {e['toggle']}; run "
                       f"`{e['repro']}` and `forensics compare` it with this run — "
                       f"if it is the cause, {e['if_cause']}; if not, {e['if_not']}")  # fmt: skip
        return out

    def sentences(self, headline: bool = True) -> list[str]:
        """The findings in sentences (`headline`: with the headline's, the top suspect's
        first request and first corrupted one: the report leaves it out where the top
        suspect is not its verdict, whose time is the one it prints)."""
        r = self.ranking
        how = (f"{counted(len(r.tested), 'predicate')} tested ({self.method}, FDR {self.fdr:g}; "
               f"{len(r.screened_out)} screened out before testing)")  # fmt: skip
        if not r.requests:
            return ["suspects: no judged harness request to test factors against"]
        if not r.corrupted:
            return [f"suspects: none of {r.requests:,} judged requests is corrupted: "
                    "nothing to explain"]  # fmt: skip
        out = self._findings(how) if self.found() else [self._none_found(how)]
        if headline and self.headline is not None:
            out.insert(1, self.headline.sentence())
        explained = [s for s in self.lines() if s.verdict == LOAD]
        if explained:
            names = "; ".join(s.predicate for s in explained[:3])
            out.append(f"explained by load (no association within load strata): {names}")
        masked = [s for s in self.lines() if s.verdict == MASKED]
        if masked:  # harm load hid: worth a look, after the suspects
            out.append("harmful within load strata, masked by load (less corruption crude, "
                       "more within each stratum): " + "; ".join(
                           f"{s.predicate} ({_pooled(s)})" for s in masked[:3]))  # fmt: skip
        reversed_ = [s for s in self.lines() if s.verdict == REVERSED]
        if reversed_:
            out.append("reversed within load strata (more corruption crude, less within each "
                       "stratum: not suspects): " + "; ".join(
                           f"{s.predicate} ({_pooled(s)})" for s in reversed_[:3]))  # fmt: skip
        after = [s for s in self.lines() if s.verdict == AFTER]
        if after:  # what corruption caused, if anything: its timing, never its cause
            named = "; ".join(f"{s.predicate} ({_counts(s)})" for s in after[:3])
            out.append(f"consequences (logged after the transfer, ranked last): {named}")
        peers = self.peers
        if peers.get("in_a_snapshot"):  # the outcome of others: reported, never a factor
            beside, seen = peers["beside_another_corrupted"], peers["in_a_snapshot"]
            out.append(f"peers (not a factor: their outcome): {beside:,} of {seen:,} corrupted "
                       "requests seen in a scheduler.status snapshot ran beside another "
                       "corrupted request")  # fmt: skip
        if self.left_out:
            out.append("left out as outcomes: " + ", ".join(
                f"{n:,} {why}" for why, n in self.left_out.items()))  # fmt: skip
        if self.missing_evidence:
            out.append("missing evidence: " + "; ".join(
                f"{m['feature']} ({m['needs']})" for m in self.missing_evidence[:4]))  # fmt: skip
        out += self._lines_said()
        return out

    def _lines_said(self) -> list[str]:
        """The family of lines near the transfer: its size, its grid, the windows skipped."""
        r = self.ranking
        tested = sum(1 for s in r.tested if s.feature.startswith("line "))
        screened = sum(1 for s in r.screened_out if s.feature.startswith("line "))
        below = [k.why for k in r.skipped if k.feature == "lines" and "resolution" in k.why]
        grid = [d for d in GRID_S if not any(why.startswith(f"Δ {d:g} s") for why in below)]
        if not tested + screened:
            return []
        deltas = "/".join(f"{d:g}" for d in grid)
        out = (f"lines near the transfer: {counted(tested + screened, 'family', 'families')} "
               f"(a template before or after, each over Δ {deltas} s × decode/prefill host: "
               f"Simes), {tested:,} tested, {screened:,} screened out (Tarone)")  # fmt: skip
        said = {"transfer": "the transfer's end (decode's checksum record)",
                "decode": "decode's Receive", "client": "the client's send"}  # fmt: skip
        if r.anchors:
            out += "; anchored at " + ", ".join(
                f"{said.get(k, k)} for {r.anchors[k]:,}" for k in said if r.anchors.get(k)
            )
        return [out + (f"; skipped: {'; '.join(below)}" if below else "")]


def _no_experiment(first: Suspect, top: Suspect | None) -> str:
    """The top suspect has no known cause to toggle: where to look instead, and whose
    experiment the next sentence prints."""
    out = f"no known experiment for the top suspect, {first.predicate}"
    if (tid := template_of(first.feature)) is not None:
        out += (f": its lines, `forensics follow --template {tid}`; a pattern that names "
                f"them, `forensics templates --as-pattern {tid}`")  # fmt: skip
    if top is not None:
        out += f"; the experiment below is for {top.predicate}, the first suspect with one"
    return out


def _pooled(s: Suspect) -> str:
    """The crude and the pooled odds ratio a verdict within the strata follows from."""
    st = s.stratified
    assert st is not None
    return (f"OR {fmt_num(s.table.odds_ratio)} crude, {fmt_num(st.odds_ratio)} within load "
            f"strata, MH {fmt_p(st.p)}")  # fmt: skip


def _counts(s: Suspect) -> str:
    t = s.table
    return (f"{t.exposed_cases}/{t.exposed_total} corrupted with it vs "
            f"{t.control_cases}/{t.control_total} without")  # fmt: skip


def describe(s: Suspect, corrupted: int) -> str:
    """One suspect as a sentence for the bug report: counts, the relative risk, the
    exact interval of the odds ratio with Fisher's p and q — the interval and the
    conclusion agree."""
    t = s.table
    units = ""
    if s.units == "runs":
        units = f", runs as the units ({', '.join(s.runs_with)} vs {', '.join(s.runs_without)}"
        if len(s.runs_with) * len(s.runs_without) > 1 and s.weakest_pair:
            a, b = s.weakest_pair
            units += f"; counts pooled, the statistics of the weakest pair, {a} vs {b}"
        units += ")"
    strat = ""
    if s.stratified and s.stratified.p is not None:
        strat = (f"; within load strata OR {fmt_num(s.stratified.odds_ratio)}, "
                 f"{fmt_p(s.stratified.p)}")  # fmt: skip
    more = f"; +{len(s.members) - ALIKE} more" if len(s.members) > ALIKE else ""
    also = f"; alike: {'; '.join(s.members[:ALIKE])}{more}" if s.members else ""
    if s.selected:
        also += f"; holds at: {', '.join(s.selected)} (Benjamini–Bogomolov)"
    causes = f"; known causes: {', '.join(s.known_causes)}" if s.known_causes else ""
    return (f"{s.predicate}: {_counts(s)} — RR {fmt_num(t.relative_risk)} "
            f"({fmt_ci(t.rr_low, t.rr_high)}), OR {fmt_num(t.odds_ratio)} (exact "
            f"{fmt_ci(t.or_low, t.or_high)}), Fisher {fmt_p(t.p_value)}, {fmt_p(s.q, 'q')}; "
            f"covers {s.covers} of {corrupted} corrupted{units}{strat}{also}{causes}")  # fmt: skip


def suspects(
    db: Db = None,
    runs: Runs = None,
    fdr: float = ALPHA,
    min_support: int = 5,
    dependent: bool = False,
    features: tuple[Feature, ...] | None = None,
) -> Suspects:
    """Every factor of the judged requests of `runs` (all when None), ranked by its
    association with corruption (`features`: the declared ones unless given). See the
    module's docstring and rank.py."""
    if not 0 < fdr < 1:
        raise ForensicsError(f"--fdr must be between 0 and 1, not {fdr:g}")
    if min_support < 1:
        raise ForensicsError(f"--min-support must be at least 1, not {min_support}")
    features = features or declared()
    with scoped(db, runs) as s:
        key = ("suspects", tuple(s.runs), fdr, min_support, dependent,
               tuple(f.name for f in features))  # fmt: skip
        return s.memo(key, lambda: _suspects(s, fdr, min_support, dependent, features))


def _suspects(
    s: Scope, fdr: float, min_support: int, dependent: bool, features: tuple[Feature, ...]
) -> Suspects:
    con, chosen, tags = s.con, s.runs, s.tags
    table = load_table(con, chosen, tags, features)
    near_preds, near_skipped = _near(s, table)
    named_preds, named_skipped = named_predicates(s, table)
    extra = (near_preds + named_preds, near_skipped + named_skipped)
    ranking = rank(table, features, fdr, min_support, dependent, extra)
    needs = {f.name: f.needs for f in features}
    missing = [
        {"feature": k.feature, "needs": needs[k.feature]}
        for k in ranking.skipped
        if k.why.startswith("no request") and k.feature in needs
    ]
    method = "Benjamini–Yekutieli" if dependent else "Benjamini–Hochberg"
    _mark_already_run(ranking, tags)
    out = Suspects(chosen, fdr, method, min_support, ranking, table.left_out, missing,
                   _peers(con, chosen))  # fmt: skip
    found = out.found()
    out.table, out.rows = table, request_rows(con, table)
    out.headline = headline(table, out.rows, found[0] if found else None)
    return out


def named_predicates(s: Scope, table: Table) -> tuple[list[Predicate], list[Skipped]]:
    """The values lines about each of `table`'s requests name (`a line about it names
    agent X`): as ingest stored them (the scope they were stored for), else computed —
    once a scope (`suspects` and the report's pairs both ask; a table's rows are its
    runs' judged requests whatever its factors)."""

    def make() -> tuple[list[Predicate], list[Skipped]]:
        got = _stored(s, table)
        return got[1] if got is not None else named_levels(s.con, table)

    return s.memo(("named_predicates", tuple(s.runs)), make)


def _near(s: Scope, table: Table) -> tuple[list[Predicate], list[Skipped]]:
    """The lines near each transfer: as ingest stored them where this scope is the one
    they were stored for (every run, no window, nothing shadowed), else computed."""
    got = _stored(s, table)
    return got[0] if got is not None else near(s.con, s.followed, table)


def _stored(s: Scope, table: Table) -> tuple[tuple, tuple] | None:
    """The stored rows, read once a scope, where this scope is the one they were stored
    for (None: it is not, or they are stale)."""
    if s.run is None and s.pristine:
        return s.memo(("stored_near", tuple(s.runs)), lambda: read_stored(s.con, table))
    return None


_TAG = re.compile(r"--tag (\S+?)=(\S+)")


def _mark_already_run(ranking: Ranking, tags: dict[str, dict]) -> None:
    """An experiment whose run is already in the incident (a run tagged as its `repro`
    line tags it) is evidence present, not a next step: its runs go in `already_run`."""
    for s in ranking.tested:
        if s.experiment is None:
            continue
        wanted = dict(_TAG.findall(s.experiment["repro"]))
        s.experiment["already_run"] = [
            run for run, t in tags.items()
            if wanted and all(str((t or {}).get(k)) == v for k, v in wanted.items())
        ]  # fmt: skip


def _peers(con: duckdb.DuckDBPyConnection, runs: list[str]) -> dict[str, int]:
    """Reported apart, never a factor (it is the outcome of others): how many corrupted
    requests ran beside another corrupted one in a scheduler.status snapshot."""
    marks = ", ".join("?" * len(runs))
    row = con.execute(
        f"""WITH snap AS (
                SELECT run, host, ts_us, unnest(from_json(running_rids, '["VARCHAR"]')) AS rid
                FROM scheduler_status WHERE json_valid(running_rids) AND run IN ({marks})
            ), bad AS (
                SELECT DISTINCT run, rid FROM results WHERE corrupted AND run IN ({marks})
            ), together AS (
                SELECT s.run, s.host, s.ts_us, list(s.rid) AS rids, count(*) AS n
                FROM snap s JOIN bad b USING (run, rid) GROUP BY ALL
            )
            SELECT (SELECT count(*) FROM bad),
                   (SELECT count(DISTINCT r.rid) FROM together, unnest(rids) AS r(rid)
                    WHERE n > 1),
                   (SELECT count(DISTINCT rid) FROM snap JOIN bad USING (run, rid))""",
        runs * 2,
    ).fetchall()[0]
    corrupted, beside, seen = row
    return {"corrupted": corrupted, "in_a_snapshot": seen, "beside_another_corrupted": beside}


__all__ = ["Suspects", "describe", "known_causes", "named_predicates", "suspects"]
