"""An experiment's plan: one TOML file, its keys declared once here (type, default, the
verbs that read them) — the docs are made from this table and a key it does not hold is
refused, so a typo never silently changes an experiment."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ForensicsError

VERBS = ("ab", "check", "minimize")
DIRECTIONS = {"two-sided": 0, "higher": 1, "lower": -1}
ALL = VERBS


@dataclass(frozen=True)
class Key:
    name: str
    type: str  # str | int | float | list | table | tables
    default: object
    verbs: tuple[str, ...]
    doc: str


KEYS = (
    Key("url", "str", "http://127.0.0.1:30000", ALL,
        "where the reproducer sends requests (an arm's own `url` wins)"),
    Key("model", "str", None, ALL, "the model name (else the server's first)"),
    Key("scenario", "str", None, ALL, "the reproducer's scenario file (else the built-in one)"),
    Key("seed", "int", 0, ALL, "the reproducer's seed"),
    Key("sessions", "int", 32, ALL, "sessions a block"),
    Key("rounds", "int", 4, ALL, "rounds a session"),
    Key("timeout_s", "float", 120.0, ALL, "a request's timeout"),
    Key("max_requests", "int", 6000, ("ab", "check"),
        "budget over the whole experiment, requests sent (every arm)"),
    Key("max_tests", "int", 24, ("minimize",), "checks `minimize` may run"),
    Key("test_requests", "int", 1500, ("minimize",), "budget of each of minimize's checks"),
    Key("min_effect", "float", 2.0, ("ab",),
        "the relative risk that matters: `equivalent` when the RR's interval lies inside "
        "[1/min_effect, min_effect]"),
    Key("max_diff", "float", None, ("ab",),
        "an absolute margin for near-zero rates: `equivalent` when both rates are bounded "
        "below it"),
    Key("alpha", "float", 0.05, ALL, "the error the sequential test allows"),
    Key("direction", "str", "two-sided", ("ab",),
        "`higher` (`lower`): `differs` only when the second arm's rate is higher (lower) "
        "— a one-sided test, faster that way"),
    Key("good_rate", "float", None, ("check", "minimize"),
        "a corruption rate that is fine (check: exit 0 when the rate is here)"),
    Key("bad_rate", "float", None, ("check", "minimize"),
        "a rate that is a bug (check: exit 1); between the two, either answer may come"),
    Key("flags", "list", None, ("minimize",),
        "the failing configuration's flags, one string each, for minimize to shrink"),
    Key("max_minutes", "float", None, ALL, "wall-clock budget (undecided when it runs out)"),
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
START_KEYS = {"command": (str, list), "health": str, "timeout_s": (int, float)}
BUILD_KEYS = {"command": str}
ARM_KEYS = {"name": str, "flags": str, "env": dict, "url": str}
_TYPES = {"str": str, "int": int, "float": (int, float), "list": list, "table": dict,
          "tables": list}  # fmt: skip


@dataclass
class Arm:
    name: str
    flags: str = ""
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None


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
    try:
        raw = p.read_bytes()
        data = tomllib.loads(raw.decode())
    except OSError as exc:
        raise ForensicsError(f"plan {p}: {exc.strerror}") from None
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
    start = _table(p, data.get("start"), START_KEYS, "start", need="command")
    build = _table(p, data.get("build"), BUILD_KEYS, "build", need="command")
    arms = [_arm(p, a, i) for i, a in enumerate(data.get("arms") or [])]
    plan = Plan(p, hashlib.sha256(raw).hexdigest(), verb, data, arms, start, build)
    _needs(plan)
    return plan


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
    return Arm(a["name"], a.get("flags", ""), dict(env), a.get("url"))


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
    rows = ["| key | type | default | read by | what it does |", "|---|---|---|---|---|"]
    for k in KEYS:
        default = "—" if k.default is None else f"`{k.default}`"
        rows.append(f"| `{k.name}` | {k.type} | {default} | {', '.join(k.verbs)} | {k.doc} |")
    return "\n".join(rows) + "\n"
