"""Reading within bounds: no line, record or document of an input is held past the size
one record may have (a 200 MB trace line, a decompression bomb with no newline): what is
past it is quarantined with its line and size, and the lines after it are read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .journald.context import MAX_RECORD_BYTES, ReadContext, too_long

__all__ = ["MAX_RECORD_BYTES", "lines", "read_whole", "too_long"]


def lines(stream: BinaryIO, ctx: ReadContext, limit: int = MAX_RECORD_BYTES) -> Iterator[bytes]:
    """The stream's lines as `for raw in stream` gives them, but none past `limit` bytes:
    such a line is read through (a piece at a time) and quarantined by its number, and
    an empty line takes its place so the lines after it keep their numbers (it is not
    counted as a blank line)."""
    n = 0
    while raw := stream.readline(limit + 1):
        n += 1
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw
            continue
        size, head = len(raw), raw[:200]
        raw = b""
        while (more := stream.readline(limit + 1)) and not more.endswith(b"\n"):
            size += len(more)
        size += len(more)
        ctx.reject(n, too_long(size, limit), head)
        ctx.markers -= 1  # the reader counts the empty line in its place as a blank one
        yield b"\n"


def read_whole(stream: BinaryIO, ctx: ReadContext, limit: int = MAX_RECORD_BYTES) -> bytes | None:
    """The rest of the stream as one document, or None (quarantined at line 1 with its
    size) where it is past `limit` bytes."""
    data = stream.read(limit + 1)
    if len(data) <= limit:
        return data
    size, head = len(data), data[:200]
    data = b""
    while more := stream.read(1 << 20):
        size += len(more)
    ctx.reject(1, too_long(size, limit), head)
    return None
