"""What the reproducer's sessions say: prompts, tools and their JSON Schemas, as data (TOML).

Fields (all but `name` and `turns` optional; the built-in `scenarios/agentic.toml` sets all):

- `name`: the scenario's name, recorded with every run.
- `system`: the system prompt; `context_chars` characters of a deterministic repository
  listing follow it (the long context; different per session, same on every replay).
- `turns`: the user turns; round r sends `turns[r % len(turns)]`.
- `tools`: `[[tools]]` tables with `name`, `description`, `parameters` (a JSON Schema,
  checked when the scenario loads, draft 7 unless it says `$schema`); tool calls are
  validated against it.
- `tool_steps`: tool calls answered within a round before it ends without a final answer.
- `tool_result_chars`: length of the deterministic result the harness answers a call with.
- `max_tokens`, `temperature` (forced to 0 with `--golden`), `stream`.
- `markup`: extra strings that must never appear in plain content (added to the built-in
  list of tool-call and special-token markup in `validators.py`).
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ForensicsError

DEFAULT = "agentic.toml"
_KEYS = {
    "name", "system", "context_chars", "turns", "tools", "tool_steps", "tool_result_chars",
    "max_tokens", "temperature", "stream", "markup",
}  # fmt: skip
_TOOL_KEYS = {"name", "description", "parameters"}


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict

    def as_openai(self) -> dict:
        return {
            "type": "function",
            "function": {
                "name": self.name, "description": self.description, "parameters": self.parameters,
            },
        }  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[str, ...]
    system: str = ""
    context_chars: int = 0
    tools: tuple[Tool, ...] = ()
    tool_steps: int = 3
    tool_result_chars: int = 1000
    max_tokens: int = 512
    temperature: float = 0.7
    stream: bool = False
    markup: tuple[str, ...] = ()
    sha256: str = field(default="", compare=False)  # of the file it came from
    source: str = field(default="", compare=False)


def load_scenario(path: str | os.PathLike | None = None) -> Scenario:
    """A scenario file, or the built-in one (None)."""
    if path is None:
        data = resources.files(__package__).joinpath("scenarios", DEFAULT).read_bytes()
        where = f"built-in {DEFAULT}"
    else:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ForensicsError(f"cannot read scenario {path}: {exc.strerror}") from None
        where = str(path)
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ForensicsError(f"scenario {where}: {exc}") from None
    return _scenario(raw, where, hashlib.sha256(data).hexdigest())


def _scenario(raw: dict, where: str, sha: str) -> Scenario:
    def bad(msg: str) -> ForensicsError:
        return ForensicsError(f"scenario {where}: {msg}")

    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r}; known: {', '.join(sorted(_KEYS))}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise bad("needs a name")
    turns = raw.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        raise bad("needs turns: a list of user messages")
    tools = tuple(_tool(t, i, bad) for i, t in enumerate(raw.get("tools", [])))
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise bad("two tools have one name")
    ints = {k: raw.get(k) for k in ("context_chars", "tool_steps", "tool_result_chars",
                                    "max_tokens") if k in raw}  # fmt: skip
    for k, v in ints.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (1 if k == "max_tokens" else 0):
            raise bad(f"{k} must be a whole number ≥ {1 if k == 'max_tokens' else 0}")
    temp = raw.get("temperature", 0.7)
    if not isinstance(temp, int | float) or isinstance(temp, bool) or not 0 <= temp <= 2:
        raise bad("temperature must be a number from 0 to 2")
    markup = raw.get("markup", [])
    if not isinstance(markup, list) or not all(isinstance(m, str) and m for m in markup):
        raise bad("markup must be a list of non-empty strings")
    if not isinstance(raw.get("stream", False), bool):
        raise bad("stream must be true or false")
    return Scenario(
        name=raw["name"], turns=tuple(turns), system=str(raw.get("system", "")), tools=tools,
        temperature=float(temp), stream=raw.get("stream", False), markup=tuple(markup),
        sha256=sha, source=where, **ints,
    )  # fmt: skip


def _tool(raw: object, i: int, bad) -> Tool:
    import fastjsonschema

    if not isinstance(raw, dict):
        raise bad(f"tools[{i}] is not a table")
    unknown = sorted(set(raw) - _TOOL_KEYS)
    if unknown:
        raise bad(f"tools[{i}]: unknown key {unknown[0]!r}")
    name, params = raw.get("name"), raw.get("parameters", {"type": "object"})
    if not isinstance(name, str) or not name:
        raise bad(f"tools[{i}] needs a name")
    if not isinstance(params, dict):
        raise bad(f"tool {name}: parameters must be a JSON Schema (a table)")
    try:
        fastjsonschema.compile(params)
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise bad(f"tool {name}: parameters are not a JSON Schema: {exc}") from None
    return Tool(name, str(raw.get("description", "")), params)


# Words of the deterministic long context and tool results: shaped like a repository.
_WORDS = (
    "src", "disaggregation", "decode", "prefill", "scheduler", "kv_cache", "transfer",
    "bootstrap", "room", "page", "allocator", "radix", "tree", "batch", "graph", "runner",
    "tests", "utils", "mooncake", "nixl", "conn", "poll", "metadata", "index", "buffer",
    "tokenizer", "manager", "server", "args", "router", "memory", "pool", "layer", "mla",
)  # fmt: skip


def filler(key: str, chars: int) -> str:
    """`chars` characters of repository-like lines, a pure function of `key`, each line
    drawn from a hash of the key and its number: text keyed by a session is that
    session's alone (`cross_talk` needs every stretch of a session's prompt to be its
    own; slices of one shared corpus overlapped at 32 sessions). About 1 µs a line."""
    if chars <= 0:
        return ""
    seed = hashlib.blake2b(key.encode(), digest_size=16).digest()
    lines, size, n = [], 0, 0
    while size < chars:
        d = hashlib.blake2b(n.to_bytes(4, "big"), digest_size=12, key=seed).digest()
        w = [_WORDS[b % len(_WORDS)] for b in d[:6]]
        line = f"{w[0]}/{w[1]}/{w[2]}/{w[3]}_{d[6]}.py:{n + 1} {w[4]} {w[5]} {d[7:12].hex()}\n"
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines)[:chars]
