"""Known causes (causes.toml): what each is, the predicates that point at it, public
references, and the experiment that tells it apart."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Experiment:
    toggle: str  # what to change on the servers
    repro: str  # the `forensics repro` line that runs it as a tagged run
    if_cause: str  # what the run shows if this is the cause
    if_not: str  # … and if it is not
    flags: str = ""  # the toggle as server flags ("" where no flag says it)
    env: dict[str, str] = field(default_factory=dict)  # … and as environment variables
    side: str = "decode"  # decode | prefill | both: the servers it goes to

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
BLOCK_REQUESTS = 100  # judged requests a block of a written plan aims at
PER_ROUND = 2  # judged requests a round: a user turn and, mostly, one tool call


def _positive(tags: dict[str, str], key: str) -> int | None:
    """A header's count, when it is one: a header may say 0 (a run that named none)."""
    value = str(tags.get(key) or "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def for_run(experiment: dict, tags: dict[str, str]) -> dict:
    """The experiment's `forensics repro` line against the run's own server, at its
    sessions and rounds (from the run header's tags; causes.toml's defaults otherwise)."""
    repro = experiment["repro"]
    url = tags.get("url")
    if url:
        repro = repro.replace(_DEFAULTS["url"], shlex.quote(url), 1)
    for key in ("sessions", "rounds"):
        value = _positive(tags, key)
        if value is not None:
            repro = re.sub(rf"--{key} \d+", f"--{key} {value}", repro, count=1)
    return {**experiment, "repro": repro}


def causes_for(feature: str, level: str | None) -> list[Cause]:
    return [c for c in known_causes() if c.matches(feature, level)]


def plan_toml(cause: str, experiment: dict, tags: dict[str, str]) -> str:
    """The `experiment ab` plan of a cause's experiment (as `for_run` gives it): the run's
    sessions (its load) in blocks of about BLOCK_REQUESTS judged requests; `[start]`
    launches the server here, on the run's port, and `url` is what it serves; an arm as
    it is and an arm with the toggle."""
    seen = str(tags.get("url") or _DEFAULTS["url"])
    port = re.search(r":(\d+)", seen.split("//", 1)[-1].rsplit("@", 1)[-1])
    port_no = int(port.group(1)) if port else 30000
    sessions = _positive(tags, "sessions") or int(_DEFAULTS["sessions"])
    rounds = max(1, round(BLOCK_REQUESTS / (sessions * PER_ROUND)))
    env = ", ".join(f"{k} = {_q(v)}" for k, v in experiment.get("env", {}).items())
    what = " ".join(experiment["toggle"].split())
    launch = f"python3 -m sglang.launch_server --port {port_no} {{flags}}"
    return "\n".join([
        f"# written by `forensics suspects --plan`: the experiment for {cause}",
        f"# toggle: {what}",
        f"# the incident's server was {_comment(seen)}: [start] launches one here, on its "
        "port, and url is what it serves",
        f'url = "http://127.0.0.1:{port_no}"',
        f"# the incident's {sessions} sessions (its load), in blocks of about "
        f"{BLOCK_REQUESTS} judged requests (a round is a user turn and its tool calls)",
        f"sessions = {sessions}",
        f"rounds = {rounds}",
        "max_requests = 6000", "min_effect = 2.0", "alpha = 0.05", "",
        f"# brings {_servers(experiment.get('side', 'decode'))} up in each arm's "
        "configuration: put your launch command here, {flags} where the arm's flags go",
        "[start]",
        f"command = {_q(launch)}",
        'health = "/health"', "timeout_s = 900", "",
        "[[arms]]", 'name = "as-is"', 'flags = ""', "",
        "[[arms]]", f"name = {_q(cause)}", f"flags = {_q(experiment.get('flags', ''))}",
        f"env = {{ {env} }}" if env else "env = {}", f"toggle = {_q(what)}", "",
    ])  # fmt: skip


def _servers(side: str) -> str:
    """The servers an experiment goes to, in words ("both": prefill and decode)."""
    return "the prefill and decode servers" if side == "both" else f"the {side} servers"


def _comment(text: str) -> str:
    """A value for a TOML comment: one line, its user-info left out."""
    return re.sub(r"//[^/@\s]*@", "//", " ".join(text.split()))


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
