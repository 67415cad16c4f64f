"""The verdict: the one hypothesis the analyses agree explains the incident, printed first.

The hypotheses come from the analyses that exist (the first failure and its cascade,
the onset, the suspects and the correlation's integrity tables) and are weighed in one
order, the first that applies winning (docs/investigations.md, "The verdict: one story";
its keys: docs/details.md):

1. `failure_cascade`: a cascade stands out and the corrupted requests concentrate after
   its first failure on the hosts it reached.
2. The top suspect (or a configuration mismatch, or an integrity association) that passes
   its screen and, where an onset is found too, explains it: scanned again without the
   requests the suspect touches, the onset is no longer found. Its kind is its factor's
   story (features.toml): `line`, `host`, `pair`, `config`, `factor`, `integrity`.
3. `onset`: a found onset no suspect explains; a failure logged inside its interval
   narrows it ("began with …"). The time factors are its evidence, never a verdict.
4. `load`: only the load's own factors pass.
5. `none`.

The others that apply follow in `others`, each in the same form.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..plural import counted
from ..scope import Scope
from ..statuses import BAD_VERDICTS
from ..timefmt import iso_us
from .cascades import FirstFailure
from .correlate import Correlation
from .onset import ALPHA as ONSET_ALPHA
from .onset import Onset, scan
from .stats import finite, fmt_num, fmt_p, fmt_pct, two_by_two
from .suspects import Suspects
from .suspects.causes import for_run, known_causes, plan_toml
from .suspects.features import declared
from .suspects.rank import Suspect

KINDS = ("failure_cascade", "onset", "line", "host", "pair", "config", "factor",
         "integrity", "load", "none")  # fmt: skip
EXPLAIN_PERMUTATIONS = 199  # the onset scanned again without a suspect's requests …
EXPLAINED = 5  # … for the first few causes only
# the families of hypotheses weighed (a cascade, a suspect, a configuration or integrity
# association, an onset): a verdict holds at ALPHA over them all (Bonferroni), so a null
# incident's verdict is `none` at ALPHA, not at ALPHA once a family
FAMILIES = 4
VERDICT_ALPHA = ONSET_ALPHA / FAMILIES
# no suspect: the experiment that says whether the bytes arrive intact, and the baseline
NONE_CAUSE = "transport-rails"
SHOWN = 4  # other hypotheses the first screen names
NO_RESULTS = (
    "no harness results: no request is judged corrupted or intact (ingest the "
    "reproducer's results beside the logs)"
)
GOLDEN = ("forensics repro http://127.0.0.1:30000 --sessions 64 --rounds 8 --golden "
          "--run golden --out golden.jsonl")  # fmt: skip


@dataclass
class Hypothesis:
    """One explanation of the incident: what it is, where, when and how sure."""

    kind: str  # one of KINDS
    statement: str  # one sentence
    host: str | None = None
    rank: int | None = None
    pair: list[str] | None = None
    ts_us: int | None = None  # when it began (µs since the epoch)
    interval_us: list[int] | None = None  # [lo, hi] around ts_us
    p: float | None = None  # the hypothesis' own test
    cause_id: str | None = None  # the first known cause (causes.toml)
    causes: list[str] = field(default_factory=list)  # the other known causes

    def as_dict(self) -> dict:
        return {k: finite(v) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass
class Verdict(Hypothesis):
    impact: dict = field(default_factory=dict)  # corrupted, judged, sessions…
    next: dict | None = None  # the experiment of its cause (causes.toml's, for this run)
    others: list[Hypothesis] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = super().as_dict()
        d["others"] = [o.as_dict() for o in self.others]
        return d

    def evidence(self) -> list[str]:
        """The lines under the statement on the first screen: the impact, the next
        experiment and the other hypotheses by kind (their statements: `others`)."""
        i = self.impact
        out = []
        if i.get("judged"):
            out.append(f"impact: {i['corrupted']:,} of {counted(i['judged'], 'judged request')}"
                       f" corrupted, in {i['sessions_corrupted']:,} of "
                       f"{counted(i['sessions'], 'session')}")  # fmt: skip
        if self.next:
            n = self.next
            out.append(f"next ({n['cause_id']}): {' '.join(n['toggle'].split())}; run "
                       f"{n['repro']}" + (f"; first the baseline: {n['baseline']}"
                                           if n.get("baseline") else ""))  # fmt: skip
        if self.others:
            said = [o.kind.replace("_", " ") + (f" ({o.cause_id})" if o.cause_id else "")
                    for o in self.others[:SHOWN]]  # fmt: skip
            more = f", +{len(self.others) - SHOWN} more" if len(self.others) > SHOWN else ""
            out.append(f"other hypotheses (report --json: verdict.others): "
                       f"{', '.join(said)}{more}")  # fmt: skip
        return out


def decide(
    s: Scope,
    first: FirstFailure | None,
    onset: Onset,
    sus: Suspects,
    correlation: Correlation,
) -> Verdict:
    """The verdict over one scope, from the analyses the report computed."""
    ranked: list[Hypothesis] = []
    cascade = _cascade(first, sus)
    if cascade is not None:
        ranked.append(cascade)
    strong = onset.found and onset.p is not None and onset.p < VERDICT_ALPHA
    candidates = _configured(s, sus) + _suspected(sus, correlation)
    causes = [(h, rows) for h, rows in candidates if h.kind != "load"]
    # the first cause that explains the onset (scanned again without its requests: the
    # first EXPLAINED candidates at most), else the onset before them all
    top = next((h for h, rows in causes[:EXPLAINED] if not strong or _explains(sus, rows)),
               None)  # fmt: skip
    ranked += [top] if top is not None else []
    if strong:
        ranked.append(_onset(onset, _first_errors(s, first), sus))
    ranked += [h for h, _ in causes if h is not top]
    ranked += [h for h, _ in candidates if h.kind == "load"]
    if not ranked:
        ranked.append(_none(sus))
    top, others = ranked[0], ranked[1:]
    return Verdict(**asdict(top), impact=_impact(sus), next=_next(top, s), others=others)


def _cascade(first: FirstFailure | None, sus: Suspects) -> Hypothesis | None:
    """The first failure, where the corrupted requests concentrate after it on the hosts
    its cascade reached (Fisher's test of those requests against the rest)."""
    if first is None or sus.table is None or sus.rows is None or not len(sus.table):
        return None
    sent = sus.rows["sent_us"]
    host = sus.table.columns.get("decode_host")
    after = sent >= first.ts_us
    if host is not None and {h for h in host if h} - set(first.hosts):
        after &= np.isin(host, first.hosts)  # only where it reached
    y = sus.table.corrupted
    t = two_by_two(int(y[after].sum()), int(after.sum()), int(y[~after].sum()),
                   int((~after).sum()))  # fmt: skip
    if not t.significant or (t.relative_risk or 0) <= 1:
        return None
    rank = "" if first.rank is None else f" TP{first.rank}"
    what = f"{first.kind} {first.code}" if first.code else first.kind
    statement = (
        f"a failure cascade: {first.host}{rank} failed first at {iso_us(first.ts_us)} "
        f"({what}); {first.echoes:,} later failures echo it on {', '.join(first.hosts)}, "
        f"and {t.exposed_cases:,} of {counted(t.exposed_total, 'request')} sent after it "
        f"there came back corrupted against {t.control_cases:,} of {t.control_total:,} "
        f"elsewhere (cascade {fmt_p(first.p)})"
    )
    ids = _cause_ids(first, sus)
    return Hypothesis("failure_cascade", statement, first.host, first.rank, None,
                      first.ts_us, [first.ts_us, first.ts_us], first.p, *_split(ids))  # fmt: skip


def _suspected(sus: Suspects, corr: Correlation) -> list[tuple[Hypothesis, np.ndarray | None]]:
    """The suspects that pass (the time factors left out: the onset's evidence) and the
    correlation's integrity associations, in the suspects' order, each with the rows it
    holds for (None: not known)."""
    stories = {f.name: f.story for f in declared()}
    out: list[tuple[Hypothesis, np.ndarray | None]] = []
    for a in corr.associations:
        if (a.table.p_value or 1.0) < VERDICT_ALPHA and (a.table.relative_risk or 0) > 1:
            exposed = _integrity_rows(a.name, sus)
            out.append((_timed(_integrity(a), exposed, sus), exposed))
    for sp in sus.found():
        kind = _kind(sp, stories)
        if kind is not None and sp.q < VERDICT_ALPHA:
            out.append((_timed(_from_suspect(sp, kind), sp.exposed, sus), sp.exposed))
    return out


def _configured(s: Scope, sus: Suspects) -> list[tuple[Hypothesis, np.ndarray | None]]:
    """Prefill and decode disagree on arguments that must agree (the config_pairs view):
    a hypothesis where the requests through the pairs that disagree are corrupted more
    (Fisher's test against the rest)."""
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""SELECT prefill_host, decode_host, name, prefill_value, decode_value
            FROM config_pairs WHERE {where} ORDER BY ALL""",
        params,
    ).fetchall()
    cols = sus.table.columns if sus.table is not None else {}
    if not rows or "prefill_host" not in cols or "decode_host" not in cols:
        return []
    pairs = {(p, d) for p, d, *_ in rows}
    exposed = np.array([(p, d) in pairs for p, d in zip(cols["prefill_host"], cols["decode_host"],
                                                          strict=True)], dtype=bool)  # fmt: skip
    y = sus.table.corrupted
    t = two_by_two(int(y[exposed].sum()), int(exposed.sum()), int(y[~exposed].sum()),
                   int((~exposed).sum()))  # fmt: skip
    if (t.p_value or 1.0) >= VERDICT_ALPHA or (t.relative_risk or 0) <= 1:
        return []
    (p0, d0, *_), differ = (
        rows[0],
        "; ".join(f"{n} {pv} on {p} against {dv} on {d}" for p, d, n, pv, dv in rows[:3]),
    )
    statement = (
        f"prefill and decode disagree on arguments that must agree ({differ}"
        f"{f'; +{len(rows) - 3} more' if len(rows) > 3 else ''}), and {t.exposed_cases:,} of "
        f"{counted(t.exposed_total, 'request')} through them came back corrupted against "
        f"{t.control_cases:,} of {t.control_total:,} elsewhere (Fisher {fmt_p(t.p_value)})"
    )
    h = Hypothesis("config", statement, host=d0, pair=[p0, d0], p=t.p_value,
                   cause_id="pd-config-mismatch")  # fmt: skip
    return [(_timed(h, exposed, sus), exposed)]


def _integrity_rows(name: str, sus: Suspects) -> np.ndarray | None:
    """The judged requests with a bad room (or in a step with unexpected page writes)."""
    cols = sus.table.columns if sus.table is not None else {}
    if name == "bad_room" and "verdict" in cols:
        return np.isin(cols["verdict"], list(BAD_VERDICTS))
    if name == "bad_step" and "unexpected_steps" in cols:
        return np.nan_to_num(cols["unexpected_steps"]) > 0
    return None


def _timed(h: Hypothesis, exposed: np.ndarray | None, sus: Suspects) -> Hypothesis:
    """When a suspect's hypothesis began: from the first request with it to the first
    corrupted one with it (send times, the client's clock)."""
    if exposed is None or sus.rows is None:
        return h
    sent = sus.rows["sent_us"]
    with_it = exposed & ~np.isnan(sent)
    if not with_it.any():
        return h
    first = int(sent[with_it].min())
    bad = with_it & sus.table.corrupted
    last = int(sent[bad].min()) if bad.any() else first
    h.ts_us, h.interval_us = first, [first, max(first, last)]
    return h


def _kind(sp: Suspect, stories: dict[str, str]) -> str | None:
    if sp.after:
        return None  # what corruption caused, if anything
    if sp.feature.startswith("line "):
        return "line"
    if sp.feature.startswith("tag "):
        return "config"
    story = stories.get(sp.feature, "factor")
    return None if story == "time" else story


def _from_suspect(sp: Suspect, kind: str) -> Hypothesis:
    t = sp.table
    ids = sp.known_causes or (["batch-load"] if kind == "load" else [])
    title = {c.id: c.title for c in known_causes()}
    said = f"; known cause: {title[ids[0]]} ({ids[0]})" if ids else ""
    statement = (
        f"{sp.predicate} goes with the corruption: {t.exposed_cases:,} of "
        f"{t.exposed_total:,} requests with it corrupted against {t.control_cases:,} of "
        f"{t.control_total:,} without (RR {fmt_num(t.relative_risk)}, Fisher "
        f"{fmt_p(t.p_value)}){said}"
    )
    h = Hypothesis(kind, statement, p=t.p_value, **dict(zip(("cause_id", "causes"),
                                                            _split(ids), strict=True)))  # fmt: skip
    if kind == "host" and sp.level:
        h.host = sp.level
    if kind == "pair" and sp.level:
        h.pair = [x.strip() for x in sp.level.split("→")]
    return h


def _integrity(a) -> Hypothesis:
    t = a.table
    statement = (
        f"{a.label} goes with the corruption: {t.exposed_cases:,} of {t.exposed_total:,} "
        f"requests with it corrupted against {t.control_cases:,} of {t.control_total:,} "
        f"without (RR {fmt_num(t.relative_risk)}, Fisher {fmt_p(t.p_value)})"
    )
    ids = ["transport-rails"] if a.name == "bad_room" else ["cuda-graph-padding"]
    return Hypothesis("integrity", statement, p=t.p_value, cause_id=ids[0])


def _explains(sus: Suspects, exposed: np.ndarray | None) -> bool:
    """Whether a suspect explains the onset: scanned again over the requests it does not
    touch, no onset is found."""
    if exposed is None or sus.table is None or sus.rows is None:
        return False
    keep = ~exposed & ~np.isnan(sus.rows["sent_us"])
    conc = sus.table.columns.get("concurrency")
    again = scan(
        sus.rows["sent_us"][keep].astype(np.int64),
        sus.table.corrupted[keep],
        conc[keep] if conc is not None else np.full(int(keep.sum()), np.nan),
        np.asarray(sus.rows["session"], dtype=object)[keep],
        permutations=EXPLAIN_PERMUTATIONS,
        bootstrap=0,
    )
    return not (again.p is not None and again.p < ONSET_ALPHA)


def _first_errors(s: Scope, first: FirstFailure | None) -> list[tuple[int, str, str]]:
    """The candidate change points a failure marks: the cascade's first failure and each
    host's first failure (time, host, kind), in time order."""
    where, params = s.where_followed()
    rows = s.con.execute(
        f"""SELECT min(ts_us), host, arg_min(kind, ts_us) FROM failures
            WHERE {where} AND ts_us IS NOT NULL GROUP BY host""",
        params,
    ).fetchall()
    out = [(int(t), str(h), str(k)) for t, h, k in rows]
    if first is not None:
        out.append((first.ts_us, first.host, first.kind))
    return sorted(set(out))


def _onset(onset: Onset, marks: list[tuple[int, str, str]], sus: Suspects) -> Hypothesis:
    """The onset; where a failure lies inside its interval, the change point it marks: the
    interval narrows to the failure and the first request sent after it."""
    assert onset.ts_us is not None and onset.ci_us is not None
    lo, hi = onset.ci_us
    ts, began = onset.ts_us, ""
    mark = next(((t, h, k) for t, h, k in marks if lo <= t <= hi), None)
    if mark is not None:
        sent = sus.rows["sent_us"] if sus.rows is not None else np.zeros(0)
        later = sent[sent >= mark[0]]
        ts = lo = mark[0]
        hi = int(later.min()) if len(later) else mark[0]
        began = f", beginning with the {mark[2]} failure {mark[1]} logged then"
    statement = (
        f"corruption began at {iso_us(ts)}{began} (95 % interval {iso_us(lo)} – {iso_us(hi)}; "
        f"{fmt_pct(onset.rate_before)} of the requests before, {fmt_pct(onset.rate_after)} "
        f"after, permutation {fmt_p(onset.p)}) and no factor explains it"
    )
    return Hypothesis("onset", statement, ts_us=ts, interval_us=[lo, hi], p=onset.p)


def _none(sus: Suspects) -> Hypothesis:
    r = sus.ranking
    if not r.requests:
        return Hypothesis("none", NO_RESULTS)
    statement = (
        f"no cause stands out: {r.corrupted:,} of {counted(r.requests, 'judged request')} "
        "corrupted, at one rate across the factors, hosts, time and load the logs show"
    )
    return Hypothesis("none", statement)


def _cause_ids(first: FirstFailure, sus: Suspects) -> list[str]:
    """A cascade's known causes: peer-loss where it began with a transfer failure (its
    requests were answered all the same: the corrupted ones concentrate after it), then
    the top suspect's."""
    ids = ["peer-loss"] if first.kind == "transfer" else []
    for sp in sus.found()[:1]:
        ids += [c for c in sp.known_causes if c not in ids]
    return ids


def _split(ids: list[str]) -> tuple[str | None, list[str]]:
    return (ids[0] if ids else None), list(ids[1:])


def _impact(sus: Suspects) -> dict:
    h = sus.headline
    if h is None:
        return {"corrupted": 0, "judged": 0, "sessions_corrupted": 0, "sessions": 0}
    return {"corrupted": h.corrupted, "judged": h.requests,
            "sessions_corrupted": h.sessions_corrupted, "sessions": h.sessions}  # fmt: skip


def _next(top: Hypothesis, s: Scope) -> dict:
    """The experiment of the verdict's cause, against the incident's own server; with no
    known cause, the checksums' experiment (do the bytes arrive intact?) and the model's
    own baseline (`repro --golden`)."""
    cause = top.cause_id or NONE_CAUSE
    exp = next(c.experiment for c in known_causes() if c.id == cause)
    tags = _tags(s)
    out = {"cause_id": cause, **for_run(exp.as_dict(), tags)}
    if top.cause_id is None:
        out["baseline"] = for_run({"repro": GOLDEN}, tags)["repro"]
    return out


def _tags(s: Scope) -> dict[str, str]:
    return next(iter(s.tags.values()), {}) if s.tags else {}


def plan(v: Verdict, tags: dict[str, str]) -> tuple[str, str]:
    """The `experiment ab` plan of the verdict's next experiment (`suspects --plan`), and
    what it is for, in a line."""
    nxt = v.next or {}
    cause = str(nxt.get("cause_id") or NONE_CAUSE)
    text = plan_toml(cause, nxt, tags)
    if v.cause_id is not None:
        return text, f"{cause}, for the verdict ({v.kind})"
    why = ("no suspect was found" if v.kind == "none"
           else f"the verdict ({v.kind}) has no known cause")  # fmt: skip
    head = (
        f"# {why}: this plan asks whether the KV bytes arrive intact (checksums on both "
        "sides);\n# measure the model's own baseline first (every session alone, "
        f"temperature 0): {nxt.get('baseline', GOLDEN)}\n"
    )
    return head + text, f"{cause}: {why}; the baseline: {nxt.get('baseline', GOLDEN)}"
