"""Predicates over the feature table: each a yes/no question about a request whose
answer is known for some requests (`known`) and true for some of those (`exposed`).

Built from the factors alone, never from the outcome: a numeric factor's thresholds are
its quantiles, a categorical's predicates its levels, an event's its presence. A
factor set per run (a tag, a server argument) is a predicate over runs: `runs_with`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...statuses import BAD_VERDICTS, ONE_SIDED
from ..stats import fmt_num
from .features import MAX_LEVELS, WINDOWS, Feature, Table

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
FEW_VALUES = 5  # a numeric factor with this many values or fewer: every value a threshold


@dataclass
class Predicate:
    feature: str
    text: str  # the predicate, in words
    exposed: np.ndarray  # bool: rows for which it holds
    known: np.ndarray  # bool: rows for which it is known
    load: bool = False
    level: str | None = None  # the value or threshold (known causes match on it)
    mirror: tuple[str, str] | None = None  # two-level factor: (other level, its text)
    runs_with: list[str] = field(default_factory=list)  # run-level predicates only
    runs_without: list[str] = field(default_factory=list)
    weakest_pair: tuple[str, str] | None = None  # set when tested: see rank._per_run
    occurrences: int | None = None  # lines behind the exposure (nearby.py), else None
    after: bool = False  # a window after the transfer: a consequence, never a cause
    family: str | None = None  # predicates asking one question over a grid (rank.py folds them)
    # a family that passes: its members that pass within it (Benjamini–Bogomolov), in words
    selected: list[str] = field(default_factory=list)

    @property
    def per_run(self) -> bool:
        return bool(self.runs_with)


@dataclass
class Skipped:
    feature: str
    why: str


def predicates(
    table: Table, features: tuple[Feature, ...]
) -> tuple[list[Predicate], list[Skipped]]:
    """Every predicate of every factor, and the factors that give none (with why)."""
    out: list[Predicate] = []
    skipped: list[Skipped] = []
    for f in features:
        col = table.columns.get(f.name)
        if col is None:
            continue
        made = _MAKERS[f.kind](f, col, table)
        if isinstance(made, Skipped):
            skipped.append(made)
        else:
            out.extend(made)
    per_run, why = _run_predicates(table)
    return out + per_run, skipped + why


def _numeric(f: Feature, col: np.ndarray, _t: Table) -> list[Predicate] | Skipped:
    known = ~np.isnan(col)
    values = col[known]
    distinct = np.unique(values)
    if len(distinct) < 2:
        return Skipped(f.name, "one value only" if len(distinct) else "no request has it")
    if len(distinct) <= FEW_VALUES:
        cuts = distinct[1:]
    else:
        cuts = np.unique(np.quantile(values, QUANTILES, method="inverted_cdf"))
        cuts = cuts[cuts > distinct[0]]
    out, seen = [], set()
    for x in cuts:
        exposed = known & (col >= x)
        key = exposed.tobytes()
        if key not in seen:  # two quantiles on one value ask one question
            seen.add(key)
            out.append(Predicate(f.name, f"{f.label} ≥ {fmt_num(float(x))}", exposed, known,
                                 f.load, fmt_num(float(x))))  # fmt: skip
    return out


def _event(f: Feature, col: np.ndarray, _t: Table) -> list[Predicate] | Skipped:
    known = ~np.isnan(col)
    if not known.any():
        return Skipped(f.name, "no request has it")
    text = f"{f.label} {WINDOWS[f.window or 'request']}"
    return [Predicate(f.name, text, known & (col > 0), known, f.load, "true")]


def _level(f: Feature, col: np.ndarray, _t: Table) -> list[Predicate] | Skipped:
    known = np.array([v is not None for v in col], dtype=bool)
    levels = sorted({v for v in col[known]})
    if len(levels) > MAX_LEVELS and not f.peers:
        return Skipped(f.name, f"{len(levels)} values (more than {MAX_LEVELS}: an identifier)")
    if len(levels) < 2:
        return Skipped(f.name, "one value only" if levels else "no request has it")

    def text(v: str) -> str:
        return f.levels.get(v) or f"{f.label} {v}"

    if len(levels) > MAX_LEVELS:  # peers (Minder's shape): each against the rest, one family
        return [Predicate(f.name, text(v), known & (col == v), known, f.load, v,
                          family=f"peers {f.name}") for v in levels]  # fmt: skip

    made = [Predicate(f.name, text(v), known & (col == v), known, f.load, v) for v in levels]
    if len(made) == 2:  # the second asks the first's question backwards
        made[0].mirror = (levels[1], text(levels[1]))
        return made[:1]
    return made


def _verdict(f: Feature, col: np.ndarray, _t: Table) -> list[Predicate] | Skipped:
    # as `correlate`: a room with checksums on one side only says nothing
    known = np.array([v is not None and v not in ONE_SIDED for v in col], dtype=bool)
    if not known.any():
        return Skipped(f.name, "no request has checksums on both sides of its room")
    exposed = known & np.array([v in BAD_VERDICTS for v in col], dtype=bool)
    return [Predicate(f.name, f.label, exposed, known, f.load, "bad")]


def _step(f: Feature, col: np.ndarray, t: Table) -> list[Predicate] | Skipped:
    known = t.steps > 0 if t.steps is not None else ~np.isnan(col)
    if not known.any():
        return Skipped(f.name, "no request is in a decode step record")
    return [Predicate(f.name, f.label, known & (col > 0), known, f.load, "true")]


_MAKERS = {"numeric": _numeric, "event": _event, "level": _level, "verdict": _verdict,
           "step": _step}  # fmt: skip


def _run_predicates(table: Table) -> tuple[list[Predicate], list[Skipped]]:
    """A tag or server argument that differs between the runs: one predicate per value,
    over runs (tested with runs as the units, see rank.py)."""
    runs = [r for r in table.run_tags if (table.run == r).any()]
    if len(runs) < 2:
        return [], []
    out, skipped = [], []
    keys = sorted({k for r in runs for k in table.run_tags[r]})
    everyone = np.ones(len(table), dtype=bool)
    for key in keys:
        value = {r: table.run_tags[r].get(key, "(unset)") for r in runs}
        levels = sorted(set(value.values()))
        if len(levels) < 2:
            continue
        name = f"tag {key}"
        if len(levels) > MAX_LEVELS:
            skipped.append(Skipped(name, f"{len(levels)} values (more than {MAX_LEVELS})"))
            continue
        what = (f"server argument {key.removeprefix('server.')}" if key.startswith("server.")
                else f"run tag {key}")  # fmt: skip
        made = []
        for v in levels:
            with_ = [r for r in runs if value[r] == v]
            without = [r for r in runs if value[r] != v]
            exposed = np.isin(table.run, with_)
            made.append(Predicate(name, f"{what} = {v}", exposed, everyone, False, v,
                                  runs_with=with_, runs_without=without))  # fmt: skip
        if len(made) == 2:
            made[0].mirror = (levels[1], f"{what} = {levels[1]}")
            made = made[:1]
        out.extend(made)
    return out, skipped
