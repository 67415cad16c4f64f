"""Is a reply corrupted? Named validators, each a pure function of the reply.

A reply is corrupted when one of these fails: `tool_json` (a tool call's arguments do not
parse or do not match the tool's declared JSON Schema, or it names no declared tool),
`markup_leak` (tool-call or special-token markup in plain content: the model's tool-call
syntax leaking past the parser, as in the incident), `diverged` (with `--golden`: the reply
differs from the same request's reply when sent alone, at temperature 0), `cross_talk`
(the reply holds another session's marker or text: `crosstalk.py`).

A request that failed (`http_error`, `timeout`) or was cut (`truncated`) is not judged
corrupted for that: those are failures, kept apart, because the question is whether the
bytes that arrived are wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

# Tool-call and special-token markup of the chat templates SGLang serves. None of these
# belongs in an answer's plain text: seen there, the tool-call parser missed it.
MARKUP = (
    "<｜DSML｜",  # DeepSeek V3.2 DSML (function_calls / invoke / parameter)
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜end▁of▁sentence｜>",  # DeepSeek V3
    "<tool_call>", "</tool_call>",  # Qwen 2.5 / 3, Hermes
    "<|tool_call|>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",  # Kimi K2
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    "<|python_tag|>", "<|eom_id|>", "<|eot_id|>",  # Llama 3.x
    "<|channel|>", "<|constrain|>", "<|call|>",  # gpt-oss harmony
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",  # ChatML
    "<|observation|>", "<arg_key>", "<arg_value>",  # GLM 4.5
    "[TOOL_CALLS]",  # Mistral
    "<minimax:tool_call>",  # MiniMax M2
)  # fmt: skip
# the failures (forensics.statuses)
CORRUPTION = ("tool_json", "markup_leak", "diverged", "cross_talk")


@dataclass
class ToolCall:
    name: str
    arguments: str  # as the server sent it: a JSON text, or not
    id: str | None = None


@dataclass
class Reply:
    """An assistant reply as the harness judges it (stream or not)."""

    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict | None = None
    id: str | None = None
    meta_info: dict | None = None  # SGLang's, when asked for (`return_meta_info`)

    def text(self) -> str:
        """The reply as one text: what `diverged` compares (offsets index into it)."""
        calls = "".join(f"\n[{c.name}]{c.arguments}" for c in self.tool_calls)
        return self.content + calls

    def as_message(self) -> dict:
        msg: dict = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for i, c in enumerate(self.tool_calls)
            ]  # fmt: skip
        return msg


class Validators:
    """The validators of one scenario: its tools' compiled schemas and markup list."""

    def __init__(self, schemas: dict[str, dict], markup: Iterable[str] = ()) -> None:
        # fastjsonschema compiles a schema to Python: 1.4 µs a call here, where jsonschema's
        # validator took 48 µs, a tenth of the harness's whole budget for a request.
        import fastjsonschema

        self._schemas = {name: fastjsonschema.compile(s) for name, s in schemas.items()}
        words = sorted({*MARKUP, *markup}, key=len, reverse=True)
        self._markup = re.compile("|".join(re.escape(w) for w in words))

    def tool_json(self, reply: Reply) -> str | None:
        from fastjsonschema import JsonSchemaValueException

        for call in reply.tool_calls:
            check = self._schemas.get(call.name)
            if check is None:
                return f"call of an undeclared tool {call.name[:60]!r}"
            try:
                args = orjson.loads(call.arguments)
            except orjson.JSONDecodeError as exc:
                return f"{call.name}: arguments are not JSON ({exc.args[0][:80]})"
            try:
                check(args)
            except JsonSchemaValueException as exc:
                return f"{call.name}: {exc.message[:160]}"
        return None

    def markup_leak(self, reply: Reply) -> str | None:
        m = self._markup.search(reply.content)
        return None if m is None else f"{m.group()!r} at offset {m.start()}"


def diverged(reply: str, golden: str, cut: bool = False) -> str | None:
    """Where `reply` first differs from `golden` (None when equal). A `cut` reply (ended
    early) differs only where it has text: it may stop inside the golden one."""
    if reply == golden:
        return None
    n = min(len(reply), len(golden))
    i = next((k for k in range(n) if reply[k] != golden[k]), n)
    if i == n and (len(reply) == len(golden) or (cut and len(reply) < len(golden))):
        return None
    return f"first difference at offset {i} (reply {len(reply)}, solo {len(golden)} chars)"
