"""`forensics templates`: what the lines of an incident say, as templates (the `lines`
table, parsers/templates.py), and which are new or far more frequent than in a baseline
(another run, or the time before a moment) — log pattern analysis, with statistics.

"New since" tests each template's rate per host-hour against the baseline's: given the
two counts' sum, the incident's count is binomial with the share of the exposure
(conditional test of two Poisson rates, one-sided, exact), Benjamini–Hochberg over the
templates, ranked by the rate ratio's lower bound (Clopper–Pearson on the share).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import ForensicsError
from ..plural import amount, counted
from ..scope import Db, Runs, Scope, scoped
from ..timefmt import iso_us
from .stats import ALPHA, binom_lower, binom_sf, fdr, fmt_num, fmt_p

SEVERITY = {"critical": 0, "error": 1, "warning": 2, "info": 3, "debug": 4}
MIN_EXPOSURE_S = 60.0  # a host seen for less is counted as seen this long
_MASK = re.compile(r"<(?:n|hex|ip|str|path|url|uuid|time|\*)>")


@dataclass
class Template:
    template: int
    text: str | None
    pattern: str | None
    level: str | None
    component: str | None
    lines: int
    hosts: dict[str, int]
    first_us: int | None
    last_us: int | None
    baseline: int | None = None  # lines in the baseline
    rate_ratio: float | None = None  # per host-hour, against the baseline
    rr_low: float | None = None  # its one-sided lower bound at 1 − alpha
    p: float | None = None
    q: float | None = None

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["template"] = str(self.template)  # 64-bit: past JSON's exact integers
        d["first"], d["last"] = iso_us(self.first_us), iso_us(self.last_us)
        return d


@dataclass
class Templates:
    runs: list[str]
    baseline: str | None  # what the counts were compared with, in words
    hours: tuple[float, float] | None  # host-hours: the incident's, the baseline's
    templates: list[Template]  # shown, best first
    total: int  # templates in the incident
    tested: int = 0
    alpha: float = ALPHA
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        shown = [t.as_dict() for t in self.templates]
        return {"runs": self.runs, "baseline": self.baseline, "host_hours": self.hours,
                "total": self.total, "tested": self.tested, "alpha": self.alpha,
                "templates": shown, "notes": self.notes}  # fmt: skip

    def sentences(self) -> list[str]:
        if self.baseline is None:
            return [f"{counted(self.total, 'template')} in {', '.join(self.runs)}"]
        mine, base = (fmt_num(x) for x in self.hours or (0.0, 0.0))
        return [f"{len(self.templates)} of {self.total} templates new or more frequent than in "
                f"{self.baseline} (q < {self.alpha:g}; {self.tested} tested, Benjamini–Hochberg; "
                f"{amount(mine, 'host-hour')} against {base})"]  # fmt: skip


def describe(t: Template) -> str:
    """One template's rate against the baseline, in words."""
    if t.baseline is None:
        return counted(t.lines, "line")
    rr = "new" if t.baseline == 0 else f"RR {fmt_num(t.rate_ratio)} (≥ {fmt_num(t.rr_low)})"
    return f"{counted(t.lines, 'line')} vs {t.baseline} — {rr}, {fmt_p(t.p)}, {fmt_p(t.q, 'q')}"


def templates(
    db: Db = None,
    run: Runs = None,
    new_since: str | None = None,
    compare: tuple[str, str] | None = None,
    limit: int = 50,
    alpha: float = ALPHA,
) -> Templates:
    """The templates of the scope's runs (most severe, then most frequent, first); with
    `new_since` (a run, or a time: before it is the baseline) or `compare` (baseline run,
    incident run), those new or more frequent than in the baseline."""
    if new_since is not None and compare is not None:
        raise ForensicsError("--new-since and --compare ask two things: give one")
    if limit < 1:
        raise ForensicsError(f"--limit must be at least 1, not {limit}")
    with scoped(db, run) as s:
        side, base_runs, said = _sides(s, new_since, compare)
        cur_runs = [r for r in (s.runs if compare is None else [compare[1]]) if r not in base_runs]
        if not cur_runs:
            raise ForensicsError("no run left to compare with the baseline")
        rows = _counts(s, side, cur_runs + base_runs)
        found = _assemble(rows)
        if said is None:
            for t in found:
                t.baseline = None
            found.sort(key=lambda t: (SEVERITY.get(t.level or "", 9), -t.lines, t.text or ""))
            return Templates(cur_runs, None, None, found[:limit], len(found))
        hours = _hours(s, side, cur_runs + base_runs)
        tested = _test(found, hours, alpha)
        shown = sorted((t for t in tested if t.q is not None and t.q < alpha),
                       key=lambda t: (-(t.rr_low or 0.0), -t.lines))  # fmt: skip
        out = Templates(cur_runs, said, hours, shown[:limit], len(found), len(tested), alpha)
        out.notes += _maskers(s, side, cur_runs + base_runs)
        return out


def _maskers(s: Scope, side: str, runs: list[str]) -> list[str]:
    """A baseline masked by an older masker than the incident: a line whose text the newer
    one masks otherwise has another id, and reads as new (said, not hidden)."""
    marks = ", ".join("?" * len(runs))
    got = dict(s.con.execute(
        f"""SELECT {side}, max(coalesce(masker, 1)) FROM lines WHERE run IN ({marks})
            GROUP BY ALL""", runs).fetchall())  # fmt: skip
    mine, base = got.get(True), got.get(False)
    if mine is None or base is None or mine == base:
        return []
    return [
        f"the baseline's lines were masked by masker {base}, these by {mine}: a line whose "
        "text the newer masker masks otherwise (an identifier such as mlx5_bond_2 is one "
        "<id> since masker 2) has another id and reads as new; ingest the baseline again "
        "to compare like with like"
    ]


def _sides(
    s: Scope, new_since: str | None, compare: tuple[str, str] | None
) -> tuple[str, list[str], str | None]:
    """SQL true for the incident's lines (false: the baseline's), the baseline's runs,
    and the baseline in words (None: no baseline)."""
    if compare is not None:
        for r in compare:
            if r not in s.tags:
                raise ForensicsError(f"no run named {r!r}; known: {', '.join(s.tags) or 'none'}")
        return f"run <> '{_q(compare[0])}'", [compare[0]], f"run {compare[0]}"
    if new_since is None:
        return "true", [], None
    if new_since in s.tags:
        return f"run <> '{_q(new_since)}'", [new_since], f"run {new_since}"
    from ..store.overlay import parse_time

    at = parse_time(new_since, "--new-since")
    return f"ts_us >= {int(at)}", [], f"the lines before {iso_us(at)}"


def _q(text: str) -> str:
    return text.replace("'", "''")


def _counts(s: Scope, side: str, runs: list[str]) -> list[tuple]:
    marks = ", ".join("?" * len(runs))
    return s.con.execute(
        f"""SELECT template, {side} AS incident, coalesce(host, '') AS host, count(*) AS n,
                   min(ts_us), max(ts_us), any_value(text), any_value(pattern),
                   mode(level), mode(component)
            FROM lines WHERE run IN ({marks}) GROUP BY ALL ORDER BY 1, 2, 3""",
        runs,
    ).fetchall()


def _assemble(rows: list[tuple]) -> list[Template]:
    """Per-(template, side, host) rows as templates: the incident's lines and hosts, the
    baseline's count (templates only the baseline has are left out)."""
    out: dict[int, Template] = {}
    base: dict[int, int] = {}
    for tid, incident, host, n, first, last, text, pattern, level, component in rows:
        if not incident:
            base[tid] = base.get(tid, 0) + n
            continue
        t = out.get(tid)
        if t is None:
            t = out[tid] = Template(tid, text, pattern, level, component, 0, {}, first, last)
        t.lines += n
        t.hosts[host] = n
        t.first_us = min(x for x in (t.first_us, first) if x is not None) if first else t.first_us
        t.last_us = max(x for x in (t.last_us, last) if x is not None) if last else t.last_us
    for tid, t in out.items():
        t.baseline = base.get(tid, 0)
    return list(out.values())


def _hours(s: Scope, side: str, runs: list[str]) -> tuple[float, float]:
    """Host-hours seen on each side: every host's first to last line (at least a minute)."""
    marks = ", ".join("?" * len(runs))
    got = dict.fromkeys((True, False), 0.0)
    for incident, secs in s.con.execute(
        f"""SELECT {side}, (max(ts_us) - min(ts_us)) / 1e6 FROM lines
            WHERE run IN ({marks}) AND ts_us IS NOT NULL GROUP BY {side}, host""",
        runs,
    ).fetchall():
        got[bool(incident)] += max(float(secs or 0.0), MIN_EXPOSURE_S) / 3600
    return got[True], got[False]


def _test(found: list[Template], hours: tuple[float, float], alpha: float) -> list[Template]:
    ta, tb = hours
    if tb <= 0:
        raise ForensicsError("the baseline has no lines: nothing to compare with")
    share = ta / (ta + tb)
    for t in found:
        a, b = t.lines, t.baseline or 0
        t.p = binom_sf(a, a + b, share)
        t.rate_ratio = math.inf if b == 0 else (a / ta) / (b / tb)
        low = binom_lower(a, a + b, alpha)
        t.rr_low = math.inf if low >= 1 else low / (1 - low) * tb / ta
    for t, q in zip(found, fdr([t.p or 1.0 for t in found]), strict=True):
        t.q = q
    return found


TOP_VALUES = 10  # values listed a name in `templates --show`


@dataclass
class NamedValue:
    name: str
    lines: int  # lines of the template naming it
    distinct: int
    top: list[tuple[str, int]]  # (value, lines), most first, TOP_VALUES at most

    def as_dict(self) -> dict:
        return {"name": self.name, "lines": self.lines, "distinct": self.distinct,
                "top": [{"value": v, "lines": n} for v, n in self.top]}  # fmt: skip


@dataclass
class Shown:
    template: int
    text: str | None
    lines: int
    values: list[NamedValue]

    def as_dict(self) -> dict:
        return {"template": self.template, "text": self.text, "lines": self.lines,
                "values": [v.as_dict() for v in self.values]}  # fmt: skip


def show(db: Db, template: int | str, run: Runs = None) -> Shown:
    """A template's named values (`line_values`), each with its count of distinct values
    and the most frequent: which peers, NICs or agents its lines name, at a glance."""
    tid = int(template)
    with scoped(db, run) as s:
        where, params = s.where()
        head = s.con.execute(
            f"SELECT any_value(text), count(*) FROM lines WHERE template = ? AND {where}",
            [tid, *params],
        ).fetchall()[0]
        if not head[1]:
            raise ForensicsError(f"no template {template} in these runs")
        rows = s.con.execute(
            f"""WITH v AS (SELECT name, value, count(*) AS n FROM line_values
                           WHERE template = ? AND {where} GROUP BY ALL)
                SELECT name, sum(n)::BIGINT, count(*),
                       list((value, n) ORDER BY n DESC, value)[1:{TOP_VALUES}]
                FROM v GROUP BY name ORDER BY sum(n) DESC, name""",
            [tid, *params],
        ).fetchall()
    values = [NamedValue(n, int(k), int(d), [(str(a), int(b)) for a, b in top])
              for n, k, d, top in rows]  # fmt: skip
    return Shown(tid, head[0], int(head[1]), values)


def as_pattern(db: Db, template: int | str, run: Runs = None) -> str:
    """A TOML pattern stub for a template's lines (an `events` row each), with up to three
    of them as samples: name it, and `forensics patterns --check` it."""
    tid = int(template)
    with scoped(db, run) as s:
        where, params = s.where("l.run")
        got = s.con.execute(
            f"""SELECT any_value(l.text), any_value(l.component),
                       list(e.message ORDER BY e.ts_us)[1:3]
                FROM lines l JOIN entries e USING (source_id, entry_no)
                WHERE l.template = ? AND {where}""",
            [tid, *params],
        ).fetchall()[0]
    text, component, samples = got
    if not samples:
        raise ForensicsError(f"no template {template} in these runs")
    literal = max(_MASK.split(text or ""), key=len).strip(" :]([,")
    if len(literal) < 4 or not all(literal in m for m in samples):
        raise ForensicsError(f"template {template} has no literal text to find its lines by")
    name = f"line_{tid:016x}"
    lines = ["[[pattern]]", f'name = "{name}"  # name it', 'table = "events"',
             f'component = "{component or "sglang"}"', f"needle = {_toml(literal)}",
             f"regex = {_toml(re.escape(literal) + '(?P<detail>.*)')}",
             f'set = {{ kind = "{name}" }}']  # fmt: skip
    for m in samples:
        detail = m[m.index(literal) + len(literal) :]
        lines += ["", "[[pattern.samples]]", f"line = {_toml(m)}",
                  f'fields = {{ kind = "{name}", detail = {_toml(detail)} }}']  # fmt: skip
    return "\n".join(lines) + "\n"


def _toml(text: str) -> str:
    """A TOML basic string."""
    import json

    return json.dumps(text, ensure_ascii=False)
