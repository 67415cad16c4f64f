"""What the reproducer asks the server before a run: does it take the optional fields
(a solo probe request), and how is it configured (its server info).

The probe carries every optional field the harness would send (`rid`, `seed`,
`return_meta_info`); a field the server names in a 400 or 422 is dropped for the whole run
and the probe sent again, so that no loaded request is ever refused, or re-sent, for it.
A probe the server cannot answer at all (no connection, a refusal that names no optional
field: a wrong model or URL) ends the run before it starts, in one line.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field

import orjson

from ..errors import ForensicsError
from .exchange import PATH
from .http import Client, TransportError

OPTIONAL = ("rid", "seed", "return_meta_info")
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # SGLang's newer name, then older


@dataclass
class Probe:
    dropped: list[str] = field(default_factory=list)  # optional fields the server refused
    http_status: int | None = None
    detail: str = ""  # a 5xx's message: the run goes on, the header says so
    meta_info: bool = False  # the reply held SGLang's meta_info

    def as_header(self) -> dict:
        out: dict = {"http_status": self.http_status, "meta_info": self.meta_info}
        if self.detail:
            out["detail"] = self.detail
        return out


def _message(body: bytes) -> str:
    """A refusal's body on one line, short."""
    try:
        obj = orjson.loads(body[:65536])
    except orjson.JSONDecodeError:
        obj = body[:4000].decode("utf-8", "replace")
    text = obj if isinstance(obj, str) else orjson.dumps(obj).decode()
    return " ".join(text.split())[:300]


async def probe(client: Client, url: str, model: str, timeout: float) -> Probe:
    """One request alone, dropping the optional fields the server refuses by name."""
    out = Probe()
    rid = f"probe-{uuid.uuid4().hex}"
    fields = {"rid": rid, "seed": 0, "return_meta_info": True}
    for _ in range(len(OPTIONAL) + 1):
        body = {k: v for k, v in fields.items() if k not in out.dropped}
        ask = [{"role": "user", "content": "Reply with the word ready."}]
        body |= {"model": model, "max_tokens": 16, "temperature": 0.0, "stream": False,
                 "messages": ask}  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                resp = await client.request("POST", PATH, orjson.dumps(body),
                                            headers={"X-Request-Id": rid})  # fmt: skip
        except TimeoutError:
            raise ForensicsError(f"{url}: the probe request got no reply within {timeout:g} s "
                                 "(is the server up? raise --timeout)") from None  # fmt: skip
        except TransportError as exc:
            raise ForensicsError(f"{url}: no reply to the probe request ({exc})") from None
        out.http_status = resp.status
        msg = _message(resp.body)
        if resp.status in (400, 422):
            named = [f for f in OPTIONAL if f not in out.dropped and re.search(rf"\b{f}\b", msg)]
            if named:
                out.dropped += named
                continue
        if 400 <= resp.status < 500:
            raise ForensicsError(f"{url}: the server refused the probe request: "
                                 f"HTTP {resp.status} {msg}".strip())  # fmt: skip
        if resp.status != 200:
            out.detail = f"HTTP {resp.status} {msg}".strip()
            return out
        try:
            choice = orjson.loads(resp.body)["choices"][0]
            out.meta_info = isinstance(choice.get("meta_info"), dict)
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            out.detail = "the probe's reply is not a chat completion"
        return out
    return out


async def server_info(client: Client, timeout: float) -> tuple[str, dict] | None:
    """(path, what the server says of itself), or None where it offers nothing: its
    arguments, a PD router's per-side lists (ingest keeps them as the run's tags, without
    the runtime state)."""
    for path in SERVER_INFO_PATHS:
        try:
            async with asyncio.timeout(timeout):
                resp = await client.request("GET", path)
            info = orjson.loads(resp.body) if resp.status == 200 else None
        except (TimeoutError, TransportError, orjson.JSONDecodeError):
            continue
        if isinstance(info, dict):
            return path, info
    return None
