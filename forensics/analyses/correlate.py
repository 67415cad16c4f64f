"""Do bad rooms or unexpected page writes explain the corrupted requests, or is it noise?

Two 2×2 tables over the `requests` view: exposure (a bad room / a decode step with
unexpected page writes) × outcome (the harness marked the response corrupted), each with
Fisher's exact p and the relative risk, and one sentence that says what they mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ForensicsError
from ..scope import Db, Runs, scoped
from ..statuses import BAD_VERDICTS, ONE_SIDED, SEVERITY, UNJUDGED_SQL
from .stats import TwoByTwo, fmt_ci, fmt_num, fmt_p, two_by_two


@dataclass
class Association:
    name: str  # bad_room | bad_step
    label: str  # what exposure means, in words
    table: TwoByTwo
    excluded: int  # requests the evidence says nothing about
    excluded_why: str
    corrupted: int  # corrupted requests in the table
    conclusion: str

    def as_dict(self) -> dict:
        return {
            "name": self.name, "label": self.label, **self.table.as_dict(),
            "excluded": self.excluded, "excluded_why": self.excluded_why,
            "corrupted": self.corrupted, "significant": self.table.significant,
            "conclusion": self.conclusion,
        }  # fmt: skip


@dataclass
class Correlation:
    runs: list[str]
    requests: int  # judged: with a reply (failed requests are left out)
    corrupted: int
    associations: list[Association]
    failed: int = 0  # http_error / timeout: no reply, so no outcome

    def as_dict(self) -> dict:
        return {
            "runs": self.runs, "requests": self.requests, "corrupted": self.corrupted,
            "failed": self.failed, "associations": [a.as_dict() for a in self.associations],
        }  # fmt: skip

    def sentences(self) -> list[str]:
        out = [a.conclusion for a in self.associations]
        if self.failed:
            out.append(f"{self.failed} unjudged requests (no reply: http_error, timeout; or "
                       "uncompared) are left out of both tables")  # fmt: skip
        return out


def correlate(
    db: Db = None,
    run: Runs = None,
    bad: tuple[str, ...] = BAD_VERDICTS,
) -> Correlation:
    """Bad room × corrupted and in-a-bad-step × corrupted over the requests of `run`
    (every run pooled when None)."""
    _check_bad(bad)
    with scoped(db, run) as s:
        con = s.con
        runs = s.runs
        where, params = s.where()
        # One pass over the view (it joins every step's batch), grouped to a few dozen rows;
        # the tables are counted from those.
        groups = con.execute(
            f"""SELECT {UNJUDGED_SQL}, corrupted, verdict, steps > 0, unexpected_steps > 0, count(*)
                FROM requests WHERE {where} GROUP BY ALL""",
            params,
        ).fetchall()
        # A request with no reply has no outcome: it is in neither table.
        failed = sum(n for f, *_, n in groups if f)
        judged = [g[1:] for g in groups if not g[0]]
        # A room with checksums on one side only says nothing about whether its bytes were
        # intact: such requests have unknown exposure (unless those verdicts are chosen as bad).
        one_sided = {v for v in ONE_SIDED if v not in bad}
        room = _table(
            judged,
            exposed=lambda verdict, *_: verdict in bad,
            known=lambda verdict, *_: verdict is not None and verdict not in one_sided,
        )
        step = _table(
            judged, exposed=lambda _v, _s, hit: bool(hit), known=lambda _v, s, _h: bool(s)
        )
        return Correlation(
            runs,
            sum(g[-1] for g in judged),
            sum(g[-1] for g in judged if g[0]),
            [
                _association(
                    "bad_room", f"a bad room ({', '.join(bad)})", room,
                    "no checksum records for their room, or checksums on one side only",
                ),
                _association(
                    "bad_step", "a decode step with unexpected page writes", step,
                    "in no decode step record",
                ),
            ],
            failed,
        )  # fmt: skip


def _check_bad(bad: tuple[str, ...]) -> None:
    unknown = [v for v in bad if v not in SEVERITY or v == "match"] or ([] if bad else ["(none)"])
    if unknown:
        known = ", ".join(v for v in SEVERITY if v != "match")
        raise ForensicsError(f"not a bad verdict: {unknown[0]}; choose from {known}")


Group = tuple  # (corrupted, verdict, in a step, in a bad step, count)


def _table(
    groups: list[Group],
    exposed: Callable[[str | None, bool, bool], bool],
    known: Callable[[str | None, bool, bool], bool],
) -> tuple[TwoByTwo, int]:
    """(2×2 table, requests not classifiable) for one exposure."""
    a = n1 = c = n0 = unknown = 0
    for corrupted, verdict, in_step, in_bad, n in groups:
        if not known(verdict, in_step, in_bad):
            unknown += n
        elif exposed(verdict, in_step, in_bad):
            n1 += n
            a += n if corrupted else 0
        else:
            n0 += n
            c += n if corrupted else 0
    return two_by_two(a, n1, c, n0), unknown


def _association(
    name: str, label: str, found: tuple[TwoByTwo, int], excluded_why: str
) -> Association:
    t, excluded = found
    corrupted = t.exposed_cases + t.control_cases
    counts = (
        f"{t.exposed_cases}/{t.exposed_total} corrupted with it vs "
        f"{t.control_cases}/{t.control_total} without"
    )
    if t.exposed_total + t.control_total == 0:
        text = f"cannot test {label}: no harness request has the evidence to tell"
    elif t.p_value is None:
        missing = "no request had" if t.exposed_total == 0 else "every request had"
        text = f"cannot test {label}: {missing} it ({counts})"
    else:
        # the exact interval of the odds ratio is the one Fisher's test inverts: printed
        # beside the p, they say the same thing (where they part, at the edge, it says so)
        rr = (
            f"RR {fmt_num(t.relative_risk)}, OR {fmt_num(t.odds_ratio)} "
            f"(exact {fmt_ci(t.or_low, t.or_high)}), Fisher {fmt_p(t.p_value)}"
        )
        rr_value = t.odds_ratio if t.odds_ratio is not None else float("nan")
        if not t.interval_agrees:
            text = (
                f"borderline evidence on {label}: Fisher's p and the exact interval disagree at "
                f"the 5 % level: {rr} ({counts}); more requests would settle it"
            )
        elif t.significant and rr_value > 1:
            text = (
                f"corruption is associated with {label}: {rr}; {t.exposed_cases} of "
                f"{corrupted} corrupted requests had it ({counts})"
            )
        elif t.significant:
            text = (
                f"corruption is less frequent with {label}: {rr} ({counts}); it does not explain it"
            )
        else:
            text = f"no evidence that corruption is associated with {label}: {rr} ({counts})"
    if excluded:
        text += f"; {excluded} requests left out: {excluded_why}"
    return Association(name, label, t, excluded, excluded_why, corrupted, text)
