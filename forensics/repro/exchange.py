"""One chat-completion request: the body sent, the reply read (JSON or a stream of server-sent
events), and the verdict on it."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import orjson

from ..statuses import UNCOMPARED
from .crosstalk import CrossTalk
from .http import Client, TransportError
from .validators import Reply, ToolCall, Validators, diverged

PATH = "/v1/chat/completions"


@dataclass
class Outcome:
    """A request's verdict and what the results file says about it."""

    status: str  # ok | corrupted | http_error | timeout | truncated
    reasons: list[str]  # failed validators, or the failure
    details: dict[str, str]
    reply: Reply | None  # None: nothing usable came back
    start: float  # epoch seconds
    end: float
    latency: float  # seconds
    ttft: float | None = None  # streaming: seconds to the first event
    http_status: int | None = None

    @property
    def corrupted(self) -> bool:
        return self.status == "corrupted"


@dataclass
class Request:
    body: bytes  # JSON
    rid: str
    stream: bool
    golden: Reply | None = None  # the solo reply, when replaying under load
    attempt: int = 0  # 0, or the how-manieth resend of a failed request (--retries)
    compare: bool = False  # replaying under load (--golden): a reply without a twin is uncompared


class _Events:
    """Server-sent events of a streamed chat completion, folded into one Reply."""

    def __init__(self) -> None:
        self.buf = b""
        self.reply = Reply()
        self.calls: dict[int, ToolCall] = {}
        self.events = 0
        self.done = False
        self.error: str | None = None
        self.first: float | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        while True:
            cut = self.buf.find(b"\n\n")
            crlf = self.buf.find(b"\r\n\r\n")
            if crlf != -1 and (cut == -1 or crlf < cut):
                cut, width = crlf, 4
            else:
                width = 2
            if cut == -1:
                return
            event, self.buf = self.buf[:cut], self.buf[cut + width :]
            for line in event.splitlines():
                if line.startswith(b"data:"):
                    self._data(line[5:].strip())

    def _data(self, data: bytes) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.events += 1
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.error = self.error or f"event {self.events} is not JSON"
            return
        if not isinstance(chunk, dict):
            self.error = self.error or f"event {self.events} is not an object"
            return
        if "error" in chunk:
            self.error = self.error or f"error event: {_message(chunk)}"
            return
        try:
            self._chunk(chunk)
        except (TypeError, ValueError, AttributeError, KeyError):
            self.error = self.error or f"event {self.events} is not a chat completion chunk"

    def _chunk(self, chunk: dict) -> None:
        r = self.reply
        r.id = r.id or chunk.get("id")
        if chunk.get("usage"):
            r.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                r.content += _text(delta["content"])
            for tc in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(tc.get("index", 0)), ToolCall("", ""))
                fn = tc.get("function") or {}
                call.id = call.id or tc.get("id")
                call.name += _text(fn.get("name"))
                call.arguments += _text(fn.get("arguments"))
            if choice.get("finish_reason"):
                r.finish_reason = str(choice["finish_reason"])

    def finish(self) -> Reply:
        self.reply.tool_calls = [self.calls[i] for i in sorted(self.calls)]
        return self.reply


def _message(obj: dict) -> str:
    err = obj.get("error")
    msg = err.get("message") if isinstance(err, dict) else err
    return str(msg or obj.get("message") or "")[:200]


def _text(v: object) -> str:
    """Text as a server may send it: a string, content parts, or nothing."""
    if v is None:
        return ""
    if isinstance(v, list):  # [{"type": "text", "text": …}, …]
        return "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in v)
    return v if isinstance(v, str) else str(v)


def _reply(obj: object) -> Reply:
    """The first choice of a non-streamed completion (KeyError/TypeError/…: not one)."""
    choice = obj["choices"][0]  # type: ignore[index]
    msg = choice["message"]
    calls = [
        ToolCall(_text(fn["name"]), _arguments(fn.get("arguments")), c.get("id"))
        for c in msg.get("tool_calls") or []
        for fn in (c["function"],)
    ]
    finish = choice.get("finish_reason")
    # SGLang puts meta_info in the choice (`return_meta_info`); some versions at the top
    meta = choice.get("meta_info") or obj.get("meta_info")  # type: ignore[union-attr]
    return Reply(
        _text(msg.get("content")), calls, None if finish is None else str(finish),
        obj.get("usage"), obj.get("id"), meta if isinstance(meta, dict) else None,  # type: ignore[union-attr]
    )  # fmt: skip


def _arguments(v: object) -> str:
    # OpenAI sends a JSON text; some servers send the object itself.
    return v if isinstance(v, str) else orjson.dumps(v).decode() if v is not None else ""


async def send(client: Client, req: Request, validators: Validators, timeout: float,
               prompts: tuple[CrossTalk, int] | None = None) -> Outcome:  # fmt: skip
    """Send one request and judge the reply (`prompts`: the run's sessions and this
    request's, for `cross_talk`). Never raises for what the server does."""
    events = _Events() if req.stream else None
    body = req.body
    start, t0 = time.time(), time.perf_counter()

    def done(status: str, why: str | None, detail: str = "", http: int | None = None,
             reply: Reply | None = None) -> Outcome:  # fmt: skip
        lat = time.perf_counter() - t0
        ttft = events.first - t0 if events and events.first else None
        reasons = [why] if why else []
        details = {why: detail} if why and detail else {}
        return Outcome(status, reasons, details, reply, start, start + lat, lat, ttft, http)

    try:
        async with asyncio.timeout(timeout):
            # the rid as the request id too: what the router (sgl-model-gateway) logs
            resp = await client.request("POST", PATH, body, on_body=events.feed if events else None,
                                        headers={"X-Request-Id": req.rid})  # fmt: skip
    except TimeoutError:
        return done("timeout", "timeout", f"no complete reply within {timeout:g} s")
    except TransportError as exc:
        return done("http_error", "http_error", str(exc))
    if resp.status != 200:
        text = resp.body[:2000]
        try:
            detail = _message(orjson.loads(text)) if text else ""
        except (orjson.JSONDecodeError, AttributeError):
            detail = text[:200].decode("utf-8", "replace")
        return done("http_error", "http_error", f"HTTP {resp.status} {detail}".strip(),
                    resp.status)  # fmt: skip
    if events is not None:
        reply = events.finish()
        if events.error:
            return done("http_error", "http_error", events.error, resp.status, reply)
        if not resp.complete or not (events.done or reply.finish_reason):
            why = f"stream ended after {events.events} events without its end"
            out = done("truncated", "truncated", why, resp.status, reply)
            return _judge(out, req, validators, prompts)
    else:
        if not resp.complete:
            return done("http_error", "http_error", "connection closed inside the body",
                        resp.status)  # fmt: skip
        try:
            reply = _reply(orjson.loads(resp.body))
        except orjson.JSONDecodeError:
            return done("http_error", "http_error", "body is not JSON", resp.status)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            return done("http_error", "http_error", "body is not a chat completion",
                        resp.status)  # fmt: skip
    if reply.finish_reason == "length":
        return _judge(done("truncated", "truncated", "finish_reason length (max_tokens)",
                           resp.status, reply), req, validators, prompts)  # fmt: skip
    return _judge(done("ok", None, http=resp.status, reply=reply), req, validators, prompts)


def _judge(out: Outcome, req: Request, validators: Validators,
           prompts: tuple[CrossTalk, int] | None) -> Outcome:  # fmt: skip
    """Run the validators on what arrived. A cut reply is judged only where a cut cannot
    explain a failure: leaked markup, another session's text, and text that differs before
    the cut. A reply that passes them without the solo twin it was to be compared with
    has no verdict (`uncompared`)."""
    reply = out.reply
    assert reply is not None
    cut = out.status == "truncated"
    found: dict[str, str | None] = {"markup_leak": validators.markup_leak(reply)}
    if not cut:
        found["tool_json"] = validators.tool_json(reply)
    if req.golden is not None:
        found["diverged"] = diverged(reply.text(), req.golden.text(), cut=cut)
    if prompts is not None:
        sessions, session = prompts
        found["cross_talk"] = sessions.check(reply.text(), session, out.start, out.end)
    bad = {k: v for k, v in found.items() if v}
    if bad:
        out.status = "corrupted"
        out.reasons = sorted(bad) + out.reasons
        out.details = {**bad, **out.details}
    elif req.compare and req.golden is None and out.status == "ok":
        out.status, out.reasons = UNCOMPARED, [UNCOMPARED]
        out.details = {UNCOMPARED: "its solo twin got no reply to compare it with"}
    return out
