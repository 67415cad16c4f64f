"""A raw input line as its message and the rest: what finds a secret journald split at
LineMax across two lines (scrubbing.scrub_input)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import orjson


@dataclass
class LineView:
    before: bytes  # the line up to the message (a text rendering's header)
    message: str  # decoded with surrogateescape: bytes that are no UTF-8 survive
    obj: dict | None = None  # a JSON rendering's entry
    line_break: str | None = None

    def piece(self, line_max: int) -> bool:
        """A piece journald cut at LineMax: said (`_LINE_BREAK=line-max`), or a message of
        exactly LineMax bytes (what text renderings leave)."""
        if self.line_break is not None:
            return self.line_break == "line-max"
        return len(self.message.encode("utf-8", "surrogateescape")) == line_max

    def with_message(self, message: str) -> bytes:
        """The line with `message` in the message's place."""
        if self.obj is not None:
            return orjson.dumps({**self.obj, "MESSAGE": message})
        return self.before + message.encode("utf-8", "surrogateescape")


@lru_cache(maxsize=1)
def _headers() -> list[re.Pattern[bytes]]:
    from .parsers.journald.text import TEXT_FORMATS, header_regex

    return [re.compile(header_regex(f).encode()) for f in TEXT_FORMATS.values() if f.head]


def message_of(line: bytes) -> LineView | None:
    """The line's message: a JSON entry's MESSAGE (None when it has no text one), a text
    rendering's after its header, else the whole line (cat, plain logs)."""
    if line.startswith(b"{"):
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        msg = obj.get("MESSAGE") if isinstance(obj, dict) else None
        if not isinstance(msg, str):
            return None
        brk = obj.get("_LINE_BREAK")
        return LineView(b"", msg, obj, brk if isinstance(brk, str) else "")
    for rx in _headers():
        m = rx.match(line)
        if m is not None:
            return LineView(line[: m.end()], line[m.end() :].decode("utf-8", "surrogateescape"))
    return LineView(b"", line.decode("utf-8", "surrogateescape"))
