"""Known causes (causes.toml): what each is, the predicates that point at it, public
references, and the experiment that tells it apart."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Experiment:
    toggle: str  # what to change on the servers
    repro: str  # the `forensics repro` line that runs it as a tagged run
    if_cause: str  # what the run shows if this is the cause
    if_not: str  # … and if it is not

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    what: str
    points: tuple[str, ...]
    references: tuple[str, ...]
    experiment: Experiment

    def matches(self, feature: str, level: str | None) -> bool:
        return feature in self.points or f"{feature}={level}" in self.points

    def as_dict(self) -> dict:
        return {**asdict(self), "experiment": self.experiment.as_dict()}


@lru_cache(maxsize=1)
def known_causes() -> tuple[Cause, ...]:
    text = resources.files(__package__).joinpath("causes.toml").read_text()
    return tuple(
        Cause(c["id"], c["title"], " ".join(c["what"].split()), tuple(c["points"]),
              tuple(c["references"]), Experiment(**c["experiment"]))
        for c in tomllib.loads(text)["cause"]
    )  # fmt: skip


_DEFAULTS = {"url": "http://127.0.0.1:30000", "sessions": "64", "rounds": "8"}


def for_run(experiment: dict, tags: dict[str, str]) -> dict:
    """The experiment's `forensics repro` line against the run's own server, at its
    sessions and rounds (from the run header's tags; causes.toml's defaults otherwise)."""
    repro = experiment["repro"]
    url = tags.get("url")
    if url:
        repro = repro.replace(_DEFAULTS["url"], shlex.quote(url), 1)
    for key in ("sessions", "rounds"):
        value = str(tags.get(key) or "")
        if value.isdigit():
            repro = re.sub(rf"--{key} \d+", f"--{key} {value}", repro, count=1)
    return {**experiment, "repro": repro}


def causes_for(feature: str, level: str | None) -> list[Cause]:
    return [c for c in known_causes() if c.matches(feature, level)]
