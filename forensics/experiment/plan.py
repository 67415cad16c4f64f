"""An experiment's plan: one TOML file, its keys declared once here (type, default, the
verbs that read them) — the docs are made from this table and a key it does not hold is
refused, so a typo never silently changes an experiment."""

from __future__ import annotations

import hashlib
import math
import shlex
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ForensicsError

VERBS = ("ab", "check", "minimize")
DIRECTIONS = {"two-sided": 0, "higher": 1, "lower": -1}
ALL = VERBS


MAX_BYTES = 1 << 20  # a plan is a page of TOML: more is not a plan (or /dev/zero)
SEED_END = 1 << 64  # the reproducer's seed is an unsigned 64-bit integer


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # str | int | float | list | table | tables
    default: object
    verbs: tuple[str, ...]
    doc: str
    # the range a number must lie in, as `low`/`high` with `(`/`)` for open ends, `[`/`]`
    # closed; every number must be finite
    within: str | None = None

    def in_range(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        assert self.within is not None
        low, high = (_number(t) for t in self.within[1:-1].split(","))
        above = value > low if self.within[0] == "(" else value >= low
        below = value < high if self.within[-1] == ")" else value <= high
        return above and below


KEYS = (
    Key("url", "str", "http://127.0.0.1:30000", ALL,
        "where the reproducer sends requests (an arm's own `url` wins)"),
    Key("model", "str", None, ALL, "the model name (else the server's first)"),
    Key("scenario", "str", None, ALL, "the reproducer's scenario file (else the built-in one)"),
    Key("seed", "int", 0, ALL, "the reproducer's seed (block k uses seed + k, mod 2⁶⁴)",
        "[0,18446744073709551616)"),
    Key("sessions", "int", 32, ALL, "sessions a block", "[1,100000]"),
    Key("rounds", "int", 4, ALL, "rounds a session", "[1,10000]"),
    Key("timeout_s", "float", 120.0, ALL, "a request's timeout", "(0,86400]"),
    Key("max_requests", "int", 6000, ("ab", "check"),
        "budget over the whole experiment, requests sent (every arm)", "[1,1000000000]"),
    Key("max_tests", "int", 24, ("minimize",), "checks `minimize` may run", "[1,10000]"),
    Key("test_requests", "int", 1500, ("minimize",), "budget of each of minimize's checks",
        "[1,1000000000]"),
    Key("min_effect", "float", 2.0, ("ab",),
        "the relative risk that matters: `equivalent` when the RR's interval lies inside "
        "[1/min_effect, min_effect]", "(1,1000]"),
    Key("max_diff", "float", None, ("ab",),
        "an absolute margin for near-zero rates: `equivalent` when both rates are bounded "
        "below it", "(0,1)"),
    Key("alpha", "float", 0.05, ALL, "the error the sequential test allows", "(0,0.5)"),
    Key("direction", "str", "two-sided", ("ab",),
        "`higher` (`lower`): `differs` only when the second arm's rate is higher (lower) "
        "— a one-sided test, faster that way"),
    Key("good_rate", "float", None, ("check", "minimize"),
        "a corruption rate that is fine (check: exit 0 when the rate is here)", "(0,1)"),
    Key("bad_rate", "float", None, ("check", "minimize"),
        "a rate that is a bug (check: exit 1); between the two, either answer may come",
        "(0,1)"),
    Key("flags", "list", None, ("minimize",),
        "the failing configuration's flags, one string each, for minimize to shrink"),
    Key("max_minutes", "float", None, ALL, "wall-clock budget (undecided when it runs out)",
        "(0,1000000]"),
    Key("start", "table", None, ALL,
        "bring the server up per configuration: `command` (`{flags}` becomes the arm's "
        "flags as separate arguments; a list: one command a side of a PD deployment, each "
        "its own process group), `health` (polled until 200, default /health), "
        "`timeout_s` (default 900)"),
    Key("build", "table", None, ALL, "`command`, run once before the first block"),
    Key("arms", "tables", None, ("ab", "check"),
        "`name`, `flags`, `env` (a table), `url`: ab takes two, check one (or none: no flags)"),
)  # fmt: skip
BY_NAME = {k.name: k for k in KEYS}


def _number(text: str) -> float:
    # an int stays an int: 2**64 - 1 as a float is 2**64 (Python compares int and float
    # exactly)
    return int(text) if text.isdigit() else float(text)


START_KEYS = {"command": (str, list), "health": str, "timeout_s": (int, float)}
BUILD_KEYS = {"command": str}
ARM_KEYS = {"name": str, "flags": str, "env": dict, "url": str, "toggle": str}
_TYPES = {"str": str, "int": int, "float": (int, float), "list": list, "table": dict,
          "tables": list}  # fmt: skip


@dataclass
class Arm:
    name: str
    flags: str = ""
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    toggle: str = ""  # what the arm changes, in words (where no flag or variable says it)

    def change(self) -> str:
        """What the arm changes, as the dry-run shows it: its flags and environment
        variables, else its toggle in words, else that it runs as it is."""
        said = " ".join([self.flags, *(f"{k}={v}" for k, v in self.env.items())]).strip()
        return said or self.toggle or "as it is (no flag, no variable)"


@dataclass
class Plan:
    path: Path
    sha256: str
    verb: str
    values: dict[str, object]
    arms: list[Arm]
    start: dict | None
    build: dict | None

    def __getattr__(self, name: str) -> object:
        if name in BY_NAME:
            return self.values.get(name, BY_NAME[name].default)
        raise AttributeError(name)

    def url_of(self, arm: Arm) -> str:
        return arm.url or str(self.values.get("url", BY_NAME["url"].default))


def load_plan(path: str | Path, verb: str) -> Plan:
    """The plan at `path` for `verb`, checked: unknown keys, wrong types and what the verb
    needs are one-line errors."""
    p = Path(path)
    raw = _read(p)
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ForensicsError(f"plan {p}: not TOML: {exc}") from None
    for name, value in data.items():
        key = BY_NAME.get(name)
        if key is None:
            raise ForensicsError(f"plan {p}: unknown key {name!r} (keys: {', '.join(BY_NAME)})")
        if not isinstance(value, _TYPES[key.type]) or isinstance(value, bool):
            raise ForensicsError(f"plan {p}: {name} must be {key.type}, not {value!r}")
        if verb not in key.verbs:
            raise ForensicsError(f"plan {p}: {name} is not read by `experiment {verb}`")
        if key.within is not None and not key.in_range(value):
            raise ForensicsError(f"plan {p}: {name} must be finite and in {key.within}, "
                                 f"not {value!r}")  # fmt: skip
    start = _table(p, data.get("start"), START_KEYS, "start", need="command")
    build = _table(p, data.get("build"), BUILD_KEYS, "build", need="command")
    arms = [_arm(p, a, i) for i, a in enumerate(data.get("arms") or [])]
    plan = Plan(p, hashlib.sha256(raw).hexdigest(), verb, data, arms, start, build)
    _needs(plan)
    _runnable(plan)
    return plan


def _read(p: Path) -> bytes:
    """The plan's bytes: at most MAX_BYTES read, whatever the file is."""
    try:
        with p.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ForensicsError(f"plan {p}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ForensicsError(f"plan {p}: larger than {MAX_BYTES >> 20} MB: not a plan")
    return raw


def _runnable(plan: Plan) -> None:
    """Every command split and its program found, every arm's flags split, the scenario
    loaded: before the first block, not at it."""
    p = plan.path
    flag_sets = [a.flags for a in plan.arms] or [""]
    if plan.verb == "minimize":
        flag_sets = [" ".join(str(f) for f in plan.flags)]
    for name, table in (("start", plan.start), ("build", plan.build)):
        if table is None:
            continue
        command = table["command"]
        for c in command if isinstance(command, list) else [command]:
            for flags in flag_sets if name == "start" else [""]:
                argv = split_command(p, f"[{name}] command", c, flags)
            if shutil.which(argv[0]) is None:
                raise ForensicsError(f"plan {p}: [{name}] command: {argv[0]!r} is not a "
                                     "program found on PATH (or an executable path)")  # fmt: skip
    if plan.start is not None:
        timeout = plan.start.get("timeout_s", 900)
        if not (isinstance(timeout, int) or math.isfinite(timeout)) or not 0 < timeout <= 86400:
            raise ForensicsError(f"plan {p}: start.timeout_s must be finite and in (0,86400]")
    if plan.scenario is not None:
        from ..repro.scenario import load_scenario

        try:
            load_scenario(Path(str(plan.scenario)))
        except ForensicsError as exc:
            raise ForensicsError(f"plan {p}: scenario: {exc}") from None


def split_command(p: Path, what: str, command: str, flags: str) -> list[str]:
    """`command` with `{flags}` as `flags`' words (server.argv_of's rule), or the error."""
    out: list[str] = []
    try:
        words = shlex.split(command)
        for word in words:
            if word == "{flags}":
                out += shlex.split(flags)
            elif "{flags}" in word:
                raise ForensicsError(f"plan {p}: {what}: {{flags}} must be a word of its own")
            else:
                out.append(word)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise ForensicsError(f"plan {p}: {what}: {str(exc).lower()}") from None
    if not out:
        raise ForensicsError(f"plan {p}: {what} is empty")
    return out


def _table(p: Path, t: dict | None, keys: dict, name: str, need: str) -> dict | None:
    if t is None:
        return None
    for k, v in t.items():
        if k not in keys:
            raise ForensicsError(f"plan {p}: unknown key {name}.{k} (keys: {', '.join(keys)})")
        if not isinstance(v, keys[k]) or isinstance(v, bool):
            raise ForensicsError(f"plan {p}: {name}.{k} has the wrong type: {v!r}")
    if need not in t:
        raise ForensicsError(f"plan {p}: [{name}] needs `{need}`")
    command = t[need]
    if isinstance(command, list) and (not command or not all(isinstance(c, str) for c in command)):
        raise ForensicsError(f"plan {p}: [{name}] {need} must be a string or a list of strings")
    return t


def _arm(p: Path, a: object, i: int) -> Arm:
    if not isinstance(a, dict):
        raise ForensicsError(f"plan {p}: arms[{i}] must be a table")
    _table(p, a, ARM_KEYS, f"arms[{i}]", need="name")
    env = a.get("env") or {}
    if not all(isinstance(v, str) for v in env.values()):
        raise ForensicsError(f"plan {p}: arms[{i}].env values must be strings")
    return Arm(a["name"], a.get("flags", ""), dict(env), a.get("url"), a.get("toggle", ""))


def _needs(plan: Plan) -> None:
    p, v = plan.path, plan.verb
    for name in ("sessions", "rounds", "max_requests", "max_tests", "test_requests"):
        if int(getattr(plan, name)) < 1:
            raise ForensicsError(f"plan {p}: {name} must be at least 1")
    if not 0 < float(plan.alpha) < 0.5:
        raise ForensicsError(f"plan {p}: alpha must be in (0, 0.5)")
    if v == "ab":
        if len(plan.arms) != 2 or plan.arms[0].name == plan.arms[1].name:
            raise ForensicsError(f"plan {p}: `experiment ab` needs two [[arms]] of two names")
        if float(plan.min_effect) <= 1:
            raise ForensicsError(f"plan {p}: min_effect must be above 1")
        if plan.start is None and len({plan.url_of(a) for a in plan.arms}) < 2:
            raise ForensicsError(f"plan {p}: without [start] each arm names its own url "
                                 "(two servers, one a configuration)")  # fmt: skip
        if plan.direction not in DIRECTIONS:
            raise ForensicsError(f"plan {p}: direction must be one of {', '.join(DIRECTIONS)}")
    if v in ("check", "minimize"):
        good, bad = plan.good_rate, plan.bad_rate
        if good is None or bad is None or not 0 < float(good) < float(bad) < 1:
            raise ForensicsError(f"plan {p}: `experiment {v}` needs 0 < good_rate < bad_rate < 1")
    if v == "check" and len(plan.arms) > 1:
        raise ForensicsError(f"plan {p}: `experiment check` takes one arm (or none)")
    if v == "minimize":
        flags = plan.flags
        if not flags or not all(isinstance(f, str) and f.strip() for f in flags):
            raise ForensicsError(f'plan {p}: `experiment minimize` needs flags = ["…", …]')
        if plan.start is None:
            raise ForensicsError(f"plan {p}: `experiment minimize` needs [start] (the flags "
                                 "are the server's)")  # fmt: skip


def keys_markdown() -> str:
    """The plan keys as a Markdown table (docs/investigations.md carries it)."""
    rows = ["| key | type | default | range | read by | what it does |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for k in KEYS:
        default = "—" if k.default is None else f"`{k.default}`"
        within = "—" if k.within is None else f"`{k.within.replace('18446744073709551616', '2⁶⁴')}`"
        rows.append(f"| `{k.name}` | {k.type} | {default} | {within} | {', '.join(k.verbs)} "
                    f"| {k.doc} |")  # fmt: skip
    return "\n".join(rows) + "\n"
