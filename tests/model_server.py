"""A stand-in for an SGLang server, for the reproducer's tests and benchmark: real HTTP on
127.0.0.1 (aiohttp), `/v1/models` and `/v1/chat/completions` (JSON or server-sent events).

It answers like a model that uses tools: a pure function of the messages decides whether
the reply is a tool call (arguments valid for the declared schema) or prose. When at least
`threshold` requests are in flight as one arrives, it plants a fault in some of them (a
fixed cycle over such arrivals) and records each in `planted` (rid → kind):

- `broken_json` (arguments that do not parse), `schema` (valid JSON, wrong type),
  `markup` (`<｜DSML｜` markup leaked into prose), `diverged` (a different but well-formed
  reply: only a replay against the solo reply can tell): corruptions;
- `http_500`, `hang` (no reply until the server stops), `truncated` (finish_reason
  `length`, or a stream cut off mid-way): failures;
- `cross_talk`: the reply quotes another session's marker and the text after it, from a
  request in flight (`markup` when none is).

The reproducer's probe requests (rid `probe-…`) get no fault and are not counted. Like
SGLang it answers `return_meta_info` (without streaming) with `meta_info` in the choice,
and `/server_info` with `server_args` (a PD router's per-side lists with `pd=True`). To
test the harness's care it can refuse fields by name (`refuse`: a 422 naming the field, as
a strict OpenAI-compatible server does), fail the first `fail_first` requests with a 500,
answer only `model`, and quote shared text (`echo_shared`: the system text every session
shares and the session's own context, which `cross_talk` must not count).

With `log_dir` it also writes what an instrumented PD pair would log: `prefill.log` and
`decode.log` with SGLang's `Receive:` line for each request and checksum records for its
room; the decode side's digest differs for the rooms of corrupted replies.

    python -m tests.model_server --port 8000 [--threshold 16] [--log-dir logs/]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

import orjson
from aiohttp import web

CORRUPTIONS = ("broken_json", "schema", "markup", "diverged", "cross_talk")
FAILURES = ("http_500", "hang", "truncated")
# percent of the requests that arrive at or above the threshold
DEFAULT_FAULTS = {"broken_json": 4, "schema": 3, "markup": 4, "diverged": 3, "cross_talk": 3,
                  "http_500": 2, "hang": 2, "truncated": 2}  # fmt: skip
VERDICT = {"broken_json": "corrupted", "schema": "corrupted", "markup": "corrupted",
           "diverged": "corrupted", "cross_talk": "corrupted", "leak": "corrupted",
           "http_500": "http_error",
           "hang": "timeout",
           "truncated": "truncated"}  # fmt: skip
_WORDS = ("the", "transfer", "of", "room", "pages", "decode", "prefill", "scheduler", "runs",
          "after", "a", "timeout", "when", "kv", "cache", "is", "freed", "before", "write",
          "lands", "test", "passes", "fails", "patch", "fixes", "race", "buffer", "index")  # fmt: skip


def _h(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _prose(seed: bytes, words: int) -> str:
    out = [_WORDS[(seed[i % 16] + 7 * i) % len(_WORDS)] for i in range(words)]
    return " ".join(out).capitalize() + "."


def _value(schema: dict, seed: int) -> object:
    kind = schema.get("type")
    if kind == "integer":
        lo = int(schema.get("minimum", 1))
        return lo + seed % (int(schema.get("maximum", lo + 400)) - lo + 1)
    if kind == "number":
        return round(0.5 + seed % 90, 1)
    if kind == "boolean":
        return bool(seed & 1)
    return f"{_WORDS[seed % len(_WORDS)]}/{_WORDS[(seed >> 5) % len(_WORDS)]}_{seed % 97}.py"


def _arguments(params: dict, seed: bytes) -> dict:
    props = params.get("properties", {})
    out = {}
    for i, (name, sub) in enumerate(sorted(props.items())):
        if name in params.get("required", []) or seed[i % 16] & 1:
            out[name] = _value(sub, int.from_bytes(seed[i % 8 : i % 8 + 4], "big"))
    return out


class ModelServer:
    def __init__(self, *, threshold: int | None = None, faults: dict[str, int] | None = None,
                 log_dir: Path | None = None, model: str = "test-model",
                 latency: float = 0.002, keep_bodies: bool = False,
                 refuse: frozenset[str] = frozenset(), fail_first: int = 0,
                 server_args: dict | None = None, pd: bool = False,
                 echo_shared: bool = False, flags: frozenset[str] = frozenset(),
                 rule: tuple[frozenset[str], float] | None = None, base_rate: float = 0.0,
                 fault_seed: int = 0, die_after: int | None = None,
                 leaks: bool = False) -> None:  # fmt: skip
        self.threshold = threshold
        # experiments: a reply is corrupted with `rule`'s rate when every flag it names is
        # on (else `base_rate`), decided by a hash of (seed, flags, session, round) alone
        self.flags, self.rule, self.base_rate = flags, rule, base_rate
        self.fault_seed = fault_seed
        self.die_after = die_after  # the process exits at this request (a server that dies)
        # every reply quotes 80-400 characters of another in-flight session's context
        # (recorded as `leak`), where another session is in flight
        self.leaks = leaks
        self.latency = latency  # seconds a reply takes, so that requests overlap like in a batch
        self.faults = DEFAULT_FAULTS if faults is None else faults
        assert sum(self.faults.values()) <= 100
        self.model = model
        self.planted: dict[str, str] = {}
        self.requests = 0
        self.inflight = 0
        self.max_inflight = 0
        self._above = 0  # requests that arrived at or above the threshold
        self.bodies: dict[str, bytes] | None = {} if keep_bodies else None  # rid -> messages
        self.refuse, self.fail_first, self.echo_shared = refuse, fail_first, echo_shared
        self.server_args, self.pd = server_args, pd
        self.refused: Counter[str] = Counter()  # field -> requests refused for it
        self.request_ids: dict[str, str | None] = {}  # rid -> its X-Request-Id header
        self.probes = 0
        self._systems: dict[str, str] = {}  # rid in flight -> its system message
        self._release: asyncio.Event | None = None  # set when serving: ends the hangs
        self._logs = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            # line-buffered: a log read while the server runs has every request so far
            self._logs = {side: open(log_dir / f"{side}.log", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
                          for side in ("prefill", "decode")}  # fmt: skip

    # the model
    def _reply(self, body: dict, text: bytes) -> tuple[str, list[dict]]:
        """`text`: the messages as JSON (the model's "prompt": its hash decides the reply)."""
        messages, tools = body.get("messages", []), body.get("tools") or []
        # the end of the conversation and its length: as deterministic as a hash of all of
        # it, at a fraction of the cost (the server must not be the benchmark's bottleneck)
        seed = _h(text[-4096:] + len(text).to_bytes(8, "big"))
        since_user = 0
        for m in reversed(messages):
            if m.get("role") == "user":
                break
            since_user += m.get("role") == "assistant"
        wants_tools = seed[0] % 3  # tool calls this round, 0-2
        if tools and since_user < wants_tools:
            fn = tools[seed[1] % len(tools)]["function"]
            args = _arguments(fn.get("parameters", {}), seed)
            call = {"id": f"call_{seed.hex()[:12]}", "type": "function",
                    "function": {"name": fn["name"], "arguments": orjson.dumps(args).decode()}}  # fmt: skip
            return "", [call]
        return _prose(seed, 20 + seed[2] % 40), []

    def _leak(self, rid: str) -> str | None:
        """80-400 characters of another in-flight session's repository context (not its
        marker), where the rid's hash says."""
        own = self._systems.get(rid, "")
        mine = own[own.find("[session marker") :][:34]
        h = int.from_bytes(hashlib.blake2b(rid.encode(), digest_size=8).digest(), "big")
        for other, text in sorted(self._systems.items()):
            at = text.find("Repository:\n")
            if other == rid or at < 0 or (mine and mine in text):
                continue
            context = text[at + 12 :]
            size = 80 + h % 321
            if len(context) <= size:
                continue
            start = (h >> 16) % (len(context) - size)
            return context[start : start + size]
        return None

    def _ruled(self, messages: list[dict]) -> str | None:
        """`markup` for a reply the flag rule corrupts: a pure function of the seed, the
        flags, the session (its marker) and the round (its user turns)."""
        if self.rule is None and not self.base_rate:
            return None
        system = str(messages[0].get("content")) if messages else ""
        at = system.find("[session marker")
        session = system[at : at + 34] if at >= 0 else system[:64]
        rnd = sum(1 for m in messages if m.get("role") == "user")
        rate = self.base_rate
        if self.rule is not None and self.rule[0] <= self.flags:
            rate = self.rule[1]
        key = f"{self.fault_seed}|{','.join(sorted(self.flags))}|{session}|{rnd}".encode()
        u = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        return "markup" if u < rate else None

    def _fault(self) -> str | None:
        """The fault of the n-th request to arrive at or above the threshold: a fixed
        cycle of 100 (each kind its percentage), so every kind shows up in any 100 such
        requests; which rids get them depends on timing, and `planted` records it."""
        if self.threshold is None or self.inflight < self.threshold:
            return None
        slot = self._above % 100
        self._above += 1
        for kind, pct in self.faults.items():
            if slot < pct:
                return kind
            slot -= pct
        return None

    def _other_session(self, rid: str) -> str | None:
        """Another in-flight request's marker and the text after it (another session's)."""
        own = self._systems.get(rid, "")
        mine = own[own.find("[session marker") :][:34]
        for other, text in self._systems.items():
            at = text.find("[session marker")
            if other != rid and at >= 0 and text[at : at + 34] != mine:
                return text[at : at + 160]
        return None

    def _apply(self, kind: str, content: str, calls: list[dict],
               rid: str) -> tuple[str, list[dict], str, str]:  # fmt: skip
        """The faulty reply, its finish reason, and the fault it got."""
        if kind in ("broken_json", "schema") and not calls:
            kind = "markup"  # prose has no arguments to break
        if kind == "cross_talk":
            leak = self._other_session(rid)
            if leak is None:
                kind = "markup"
            else:
                return f"{content or 'Done.'} {leak}", [], "stop", kind
        if kind == "broken_json":
            fn = calls[0]["function"]
            fn["arguments"] = fn["arguments"][:-1] + ',"'
        elif kind == "schema":
            fn = calls[0]["function"]
            args = orjson.loads(fn["arguments"])
            args[next(iter(args))] = [1, 2]  # every declared property is a scalar
            fn["arguments"] = orjson.dumps(args).decode()
        elif kind == "markup":
            content = (content or "I will read it.") + " <｜DSML｜function_calls><｜DSML｜invoke"
            calls = []
            return content, calls, "stop", kind
        elif kind == "diverged":
            # well-formed and valid, only different: a string argument, or the prose
            args = orjson.loads(calls[0]["function"]["arguments"]) if calls else {}
            text = [k for k, v in args.items() if isinstance(v, str)]
            if text:
                args[text[0]] += "_"
                calls[0]["function"]["arguments"] = orjson.dumps(args).decode()
            else:
                content = (content or "Done.").replace(" ", "  ", 1) + " "
                calls = []
        elif kind == "truncated":
            if calls:
                calls[0]["function"]["arguments"] = calls[0]["function"]["arguments"][:5]
            else:
                content = content[: max(1, len(content) // 3)]
            return content, calls, "length", kind
        return content, calls, "tool_calls" if calls else "stop", kind

    # logs
    def _log(self, rid: str, bad: bool) -> None:
        if self._logs is None:
            return
        room = int.from_bytes(hashlib.blake2b(rid.encode(), digest_size=8).digest(), "big") >> 1
        ts = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
        digest = hashlib.blake2b(rid.encode(), digest_size=12).hexdigest()
        head, tail, full = digest[:8], digest[8:16], digest[16:]
        ck = f"rid={rid} buf=kv layer=all tp=0 nbytes=1048576 head={head}"
        self._logs["prefill"].write(
            f"[{ts} TP0] Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.0.0.1', "
            f"bootstrap_port=8998, bootstrap_room={room}, stream=False)\n"
            f"[{ts} TP0] forensics:checksum side=src room={room} {ck} tail={tail} full={full}\n"
        )
        if bad:
            tail, full = tail[::-1], full[::-1]  # the tail had not landed: partial
        self._logs["decode"].write(
            f"[{ts} TP0] Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.0.0.1', "
            f"bootstrap_port=8998, bootstrap_room={room}, stream=False)\n"
            f"[{ts} TP0] forensics:checksum side=dst room={room} {ck} tail={tail} full={full}\n"
        )

    # HTTP
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        )

    async def server_info(self, request: web.Request) -> web.Response:
        if self.server_args is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        info = {**self.server_args, "internal_states": [{"last_gen_throughput": 12.5}],
                "version": "0.5.6"}  # fmt: skip
        if self.pd:
            info = {"prefill": [info], "decode": [info, {**info, "port": 30002}]}
        return web.json_response(info)

    def _refusal(self, body: dict) -> web.Response | None:
        for name in sorted(self.refuse & body.keys()):
            self.refused[name] += 1
            detail = [{"type": "extra_forbidden", "loc": ["body", name],
                       "msg": "Extra inputs are not permitted"}]  # fmt: skip
            return web.json_response({"detail": detail}, status=422)
        if body.get("model") != self.model:
            msg = f"The model `{body.get('model')}` does not exist."
            return web.json_response({"object": "error", "message": msg, "code": 404}, status=404)
        return None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        rid = str(body.get("rid") or f"srv-{self.requests}")
        refused = self._refusal(body)
        if refused is not None:
            return refused
        probe = rid.startswith("probe-")
        self.probes += probe
        self.requests += not probe
        if self.die_after is not None and self.requests > self.die_after:
            os._exit(3)
        self.request_ids[rid] = request.headers.get("X-Request-Id")
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        if self.bodies is not None:
            self.bodies[rid] = orjson.dumps(body.get("messages"))
        messages = body.get("messages") or [{}]
        if messages[0].get("role") == "system":
            self._systems[rid] = str(messages[0].get("content"))
        try:
            kind = None if probe else (self._ruled(messages) or self._fault())
            if kind is not None:
                self.planted[rid] = kind
            self._log(rid, kind in CORRUPTIONS)
            if not probe and self.requests <= self.fail_first:
                return web.json_response({"object": "error", "message": "failing first",
                                          "code": 500}, status=500)  # fmt: skip
            if kind == "http_500":
                return web.json_response({"object": "error", "message": "planted", "code": 500},
                                         status=500)  # fmt: skip
            if kind == "hang":
                assert self._release is not None
                await self._release.wait()
                return web.json_response({}, status=503)
            if self.latency:
                await asyncio.sleep(self.latency)
            prompt = orjson.dumps(body.get("messages"))
            content, calls = self._reply(body, prompt)
            if self.echo_shared and rid in self._systems:
                system = self._systems[rid]
                at = system.find("Repository:\n")
                content, calls = f"{system[:200]} {system[at + 12 : at + 400]}", []
            finish = "tool_calls" if calls else "stop"
            if kind is not None:
                content, calls, finish, self.planted[rid] = self._apply(kind, content, calls, rid)
            elif self.leaks and not probe and (leak := self._leak(rid)) is not None:
                content, calls, finish = f"{content or 'Done.'} {leak}", [], "stop"
                self.planted[rid] = "leak"
            usage = {"prompt_tokens": len(prompt) // 4,
                     "completion_tokens": 1 + (len(content) + sum(len(c["function"]["arguments"])
                                                                   for c in calls)) // 4}  # fmt: skip
            if body.get("stream"):
                return await self._stream(request, rid, content, calls, finish, usage, kind)
            msg = {"role": "assistant", "content": content or None}
            if calls:
                msg["tool_calls"] = calls
            choice = {"index": 0, "message": msg, "finish_reason": finish}
            if body.get("return_meta_info"):
                choice["meta_info"] = {
                    "id": rid, "finish_reason": {"type": finish}, "cached_tokens": 0,
                    "prompt_tokens": usage["prompt_tokens"], "num_retractions": 0,
                    "completion_tokens": usage["completion_tokens"], "e2e_latency": 0.01,
                    "output_token_logprobs": [[-0.1, 7, None]],
                }  # fmt: skip
            out = {"id": rid, "object": "chat.completion", "created": int(time.time()),
                   "model": self.model, "choices": [choice], "usage": usage}  # fmt: skip
            return web.Response(body=orjson.dumps(out), content_type="application/json")
        finally:
            self.inflight -= 1
            self._systems.pop(rid, None)

    async def _stream(self, request: web.Request, rid: str, content: str, calls: list[dict],
                      finish: str, usage: dict, kind: str | None) -> web.StreamResponse:  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def event(delta: dict, finish_reason: str | None = None, **more: object) -> bytes:
            chunk = {"id": rid, "object": "chat.completion.chunk", "model": self.model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                     **more}  # fmt: skip
            return b"data: " + orjson.dumps(chunk) + b"\n\n"

        parts = [event({"role": "assistant", "content": ""})]
        parts += [event({"content": content[i : i + 12]}) for i in range(0, len(content), 12)]
        for i, c in enumerate(calls):
            fn = c["function"]
            parts.append(event({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                                "function": {"name": fn["name"], "arguments": ""}}]}))  # fmt: skip
            args = fn["arguments"]
            parts += [event({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 10]}}]})
                      for j in range(0, len(args), 10)]  # fmt: skip
        if kind == "truncated":
            for p in parts[: max(1, len(parts) // 2)]:
                await resp.write(p)
            assert request.transport is not None
            request.transport.close()  # the chunked body never ends
            return resp
        parts.append(event({}, finish))
        parts.append(b"data: " + orjson.dumps({"id": rid, "object": "chat.completion.chunk",
                                               "choices": [], "usage": usage}) + b"\n\n")  # fmt: skip
        parts.append(b"data: [DONE]\n\n")
        for p in parts:
            await resp.write(p)
        await resp.write_eof()
        return resp

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/server_info", self.server_info)
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    async def serve(
        self, port: int = 0, reuse_port: bool = False
    ) -> tuple[int, Callable[[], Awaitable[None]]]:
        """Listen on 127.0.0.1: (port, stop), stop ending the hangs, the server and its logs."""
        self._release = asyncio.Event()
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, reuse_port=reuse_port or None)
        await site.start()
        release = self._release

        async def stop() -> None:
            release.set()
            await runner.cleanup()
            for fh in (self._logs or {}).values():
                fh.close()

        sock = site._server.sockets[0]  # type: ignore[union-attr]
        return sock.getsockname()[1], stop


@contextmanager
def running(server: ModelServer) -> Iterator[str]:
    """The server on a thread of its own (its own event loop); yields its base URL."""
    ready = threading.Event()
    state: dict = {}

    def main() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        done = asyncio.Event()
        port, stop = loop.run_until_complete(server.serve())
        state.update(loop=loop, port=port, done=done)
        ready.set()
        loop.run_until_complete(done.wait())
        loop.run_until_complete(stop())
        loop.close()

    t = threading.Thread(target=main, daemon=True)
    t.start()
    ready.wait()
    try:
        yield f"http://127.0.0.1:{state['port']}"
    finally:
        state["loop"].call_soon_threadsafe(state["done"].set)
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--threshold", type=int, default=None, help="in-flight requests at which faults start"
    )
    ap.add_argument("--log-dir", type=Path, default=None)
    ap.add_argument("--reuse-port", action="store_true",
                    help="share the port with other server processes (the kernel spreads connections)")  # fmt: skip
    ap.add_argument("--rule", default=None,
                    help="FLAG+FLAG=RATE: corrupt that share of replies when every named flag "
                         "is on")  # fmt: skip
    ap.add_argument("--base-rate", type=float, default=0.0,
                    help="the share corrupted otherwise")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--die-after", type=int, default=None, help="exit at this request")
    a, rest = ap.parse_known_args()
    # every other `--name` is a server flag the rule may name (as an experiment's arm sets)
    flags = frozenset(t.lstrip("-") for t in rest if t.startswith("--"))
    rule = None
    if a.rule:
        names, rate = a.rule.rsplit("=", 1)
        rule = (frozenset(n.strip().lstrip("-") for n in names.split("+") if n.strip()),
                float(rate))  # fmt: skip
    server = ModelServer(threshold=a.threshold, log_dir=a.log_dir, flags=flags, rule=rule,
                         base_rate=a.base_rate, fault_seed=a.seed,
                         die_after=a.die_after)  # fmt: skip

    async def forever() -> None:
        port, stop = await server.serve(a.port, a.reuse_port)
        # A stand-in must not be the bottleneck of the harness it serves: the collector's
        # passes over a long-lived heap cost it a quarter of its time.
        gc.freeze()
        gc.set_threshold(100_000, 50, 1000)
        print(f"listening on http://127.0.0.1:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await stop()

    with suppress(KeyboardInterrupt):
        asyncio.run(forever())


if __name__ == "__main__":
    main()
