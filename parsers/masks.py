"""The masker's and the namer's rules as data (patterns/masks.toml): each a row with its
samples, read once."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Rule:
    kind: str  # prefix | mask | level | component | value
    name: str
    regex: str
    to: str = ""
    map: dict[str, str] = field(default_factory=dict)
    samples: tuple[dict[str, str], ...] = ()
    keep: str | None = None  # prefix: what the value namer reads in its place (else `to`)
    # value: what a line holds for the rule to be tried on it (a literal, or `re:REGEX`):
    # a rule is a regex pass over the text, the needle a cheaper one that skips most lines
    needle: str | None = None
    split: str | None = None  # value: split each match at the first of this (no regex pass)
    # prefix: run on every line (parsers/prefixes.py), not only where the others' gate finds one
    every: bool = False


@lru_cache(maxsize=1)
def rules() -> tuple[Rule, ...]:
    text = resources.files("forensics.parsers.patterns").joinpath("masks.toml").read_text()
    data = tomllib.loads(text)
    kinds = ("prefix", "mask", "level", "component", "value")
    return tuple(
        Rule(kind, d["name"], d["regex"], d.get("to", ""), dict(d.get("map", {})),
             tuple(d.get("samples", ())), d.get("keep"), d.get("needle"), d.get("split"),
             d.get("every", False))
        for kind in kinds for d in data.get(kind, [])
    )  # fmt: skip
