"""A session: an agent loop of rounds, each a user turn and the tool calls the model makes.

When the model calls a tool the harness answers with a deterministic result and asks
again, up to the scenario's `tool_steps` calls a round. Everything a session sends is a
pure function of (scenario, seed, session index) and of the replies it follows, so a
replay with the solo replies (`--golden`) sends byte-identical requests.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cached_property

import orjson

from ..statuses import NO_REPLY, UNCOMPARED
from .crosstalk import GRAM, CrossTalk, marker
from .exchange import Outcome, Request
from .scenario import Scenario, filler
from .validators import Reply

Key = tuple[int, int, int]  # (session, round, step)


@dataclass(frozen=True)
class Plan:
    scenario: Scenario
    model: str
    rounds: int
    seed: int
    stream: bool
    temperature: float
    retries: int = 0  # a failed request (http_error, timeout) is sent again this often
    meta_info: bool = False  # ask for SGLang's meta_info (`return_meta_info`)
    dropped: frozenset[str] = frozenset()  # optional fields the server refused (the probe)

    @cached_property
    def fixed(self) -> bytes:
        """The body's fields every request of the run shares, serialised once (no braces)."""
        sc = self.scenario
        out: dict = {
            "model": self.model, "max_tokens": sc.max_tokens, "temperature": self.temperature,
            "stream": self.stream,
        }  # fmt: skip
        if sc.tools:
            out["tools"] = [t.as_openai() for t in sc.tools]
            out["tool_choice"] = "auto"
        if self.stream:
            out["stream_options"] = {"include_usage": True}
        if self.meta_info and "return_meta_info" not in self.dropped:
            out["return_meta_info"] = True
        return orjson.dumps(out)[1:-1]


class Conversation:
    """The messages so far, each serialised once: a session's history only grows, and
    serialising all of it for every request cost more than anything else the harness did
    (100 µs a request at 30 rounds, 25 kB)."""

    def __init__(self) -> None:
        self._json: list[bytes] = []

    def add(self, message: dict) -> None:
        self._json.append(orjson.dumps(message))

    def json(self) -> bytes:
        return b"[" + b",".join(self._json) + b"]"


def system_message(plan: Plan, session: int) -> dict:
    """The shared system text, then the session's own marker (what `cross_talk` finds in
    another session's reply), then its long context."""
    sc = plan.scenario
    context = filler(f"{plan.seed}/context/{session}", sc.context_chars)
    text = f"{sc.system}\n\n{marker(plan.seed, session)}"
    return {"role": "system", "content": f"{text}\n\nRepository:\n{context}" if context else text}


def tool_result(plan: Plan, session: int, name: str, arguments: str) -> str:
    """The call's deterministic result: the session's own text (two sessions making the
    same call get different results, so a result in another's reply is cross-talk)."""
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return "error: the arguments are not valid JSON; nothing was run"
    key = f"{plan.seed}/tool/{session}/{name}/{arguments}"
    return f"{name} returned:\n{filler(key, plan.scenario.tool_result_chars)}"


def _request_seed(plan: Plan, key: Key) -> int:
    digest = hashlib.blake2b(f"{plan.seed}/{key}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") >> 1


def body(plan: Plan, conv: Conversation, rid: str, key: Key) -> bytes:
    """The request body (JSON): `rid` and `seed` first, so that a log line cut short still
    shows them (each left out where the server refused it)."""
    own = {"rid": rid, "seed": _request_seed(plan, key)}
    head = orjson.dumps({k: v for k, v in own.items() if k not in plan.dropped})[1:-1]
    return b"{" + head + (b"," if head else b"") + plan.fixed + b',"messages":' + conv.json() + b"}"


Send = Callable[[Key, Request], Awaitable[Outcome]]


def followed(out: Outcome) -> Reply | None:
    """The reply a session continues from: any that arrived whole (None: the round ends)."""
    return out.reply if out.status in ("ok", "corrupted", UNCOMPARED) else None


async def run_session(
    plan: Plan,
    session: int,
    send: Send,
    golden: dict[Key, Reply | None] | None = None,
    on_round: Callable[[], None] | None = None,
    prompts: CrossTalk | None = None,
) -> None:
    """Every round of one session. With `golden` (what the solo session continued from at
    each step), the session follows that rather than its own replies, so that each request
    is its solo twin. `prompts` is told what the session's prompts hold, and when it runs."""
    if prompts is None:
        return await _rounds(plan, session, send, golden, on_round, None)
    prompts.begin(session, plan.seed, time.time())
    try:
        await _rounds(plan, session, send, golden, on_round, prompts)
    finally:
        prompts.end(session, time.time())


async def _rounds(
    plan: Plan,
    session: int,
    send: Send,
    golden: dict[Key, Reply | None] | None,
    on_round: Callable[[], None] | None,
    prompts: CrossTalk | None,
) -> None:
    sc = plan.scenario
    conv = Conversation()
    system = system_message(plan, session)
    conv.add(system)
    if prompts is not None:
        prompts.add(session, system["content"])
    for rnd in range(plan.rounds):
        conv.add({"role": "user", "content": sc.turns[rnd % len(sc.turns)]})
        for step in range(sc.tool_steps + 1):
            key = (session, rnd, step)
            solo = golden.get(key) if golden is not None else None
            for attempt in range(plan.retries + 1):
                rid = uuid.uuid4().hex  # every attempt its own rid: its own result
                req = Request(body(plan, conv, rid, key), rid, plan.stream, solo, attempt,
                              golden is not None)  # fmt: skip
                out = await send(key, req)
                if out.status not in NO_REPLY:
                    break
            # With --golden the session goes where the solo one went, even where the solo
            # reply was itself corrupted, or where the solo round stopped (None).
            follow = golden[key] if golden is not None and key in golden else followed(out)
            if follow is None:
                break  # nothing to continue the round from: on to the next turn
            conv.add(follow.as_message())
            if prompts is not None and out.status == "ok" and len(follow.content) >= GRAM:
                # its own words, quoted later, are its own (a corrupted reply's are not)
                prompts.add(session, follow.content)
            # Every call is answered, even the last a round allows: APIs refuse a history
            # with an assistant's tool call and no tool message after it.
            for i, call in enumerate(follow.tool_calls):
                result = tool_result(plan, session, call.name, call.arguments)
                conv.add({"role": "tool", "tool_call_id": call.id or f"call_{i}",
                          "content": result})  # fmt: skip
                if prompts is not None:
                    prompts.add(session, result)
            if not follow.tool_calls:
                break
        if on_round is not None:
            on_round()
