"""`journalctl -o export`: binary-safe; the reader behind .journal files too.

An entry is fields `NAME=value\\n`, or `NAME\\n` + u64le length + raw bytes + `\\n` when
the value is not printable text, and ends with an empty line.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa

from .context import ReadContext
from .schema import FIELD_MAP, RowBuilder, extra_value

READ_SIZE = 8 << 20
BATCH_ROWS = 50_000
_NAME = re.compile(rb"[A-Za-z0-9_]+\Z")
_U64 = struct.Struct("<Q")
# A field claiming more is taken as damage (journald's own ceiling is 768 MiB, but no log
# line comes near 64 MiB): the reader must not buffer the rest of the stream waiting for
# bytes that will never come.
FIELD_MAX = 64 << 20


class _NeedMore(Exception):
    """The buffer ends inside the entry being parsed."""


def _parse_slow(buf: bytes, pos: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """Fields of the entry at pos, one at a time (for entries with binary values)."""
    fields: list[tuple[bytes, bytes]] = []
    p = pos
    n = len(buf)
    while True:
        nl = buf.find(b"\n", p)
        if nl < 0:
            raise _NeedMore
        line = buf[p:nl]
        if not line:
            return fields, nl + 1
        name, sep, value = line.partition(b"=")
        if sep:
            fields.append((name, value))
            p = nl + 1
            continue
        if n < nl + 9:
            raise _NeedMore
        (size,) = _U64.unpack_from(buf, nl + 1)
        if size > FIELD_MAX:
            raise ValueError(f"binary field {name[:40]!r} claims {size} bytes")
        start = nl + 9
        stop = start + size
        if n < stop + 1:
            raise _NeedMore
        if buf[stop : stop + 1] != b"\n":
            raise ValueError(f"binary field {name[:40]!r} not followed by a newline")
        fields.append((line, buf[start:stop]))
        p = stop + 1


def _skip_entry(
    buf: bytes, pos: int, line: int, ctx: ReadContext, why: str | None
) -> tuple[int, int]:
    """Quarantine the damaged entry at pos and resynchronise at the next blank line:
    (position, line number) to read on from."""
    skip = buf.find(b"\n\n", pos)
    skip = len(buf) if skip < 0 else skip + 2
    if why is None:
        why = "stream ends inside an entry" if skip == len(buf) else "field runs past the end"
    ctx.reject(line, f"export: {why}", buf[pos:skip][:4096])
    return skip, line + buf.count(b"\n", pos, skip)


def _entry(fields: list[tuple[bytes, bytes]], ctx: ReadContext, line: int):
    values: dict[str, object] = {}
    extra: dict[str, object] | None = None
    for name_b, value in fields:
        name = name_b.decode("ascii", "replace")
        col = FIELD_MAP.get(name)
        if col is not None:
            if col not in values:
                values[col] = value
            continue
        if name.startswith("__"):
            continue  # export may grow new address fields; they carry no log content
        if not _NAME.match(name_b):
            ctx.reject(line, f"export: invalid field name {name[:40]!r}", name_b + b"=" + value)
            continue
        text = extra_value(value)
        if extra is None:
            extra = {}
        old = extra.get(name)
        if old is None:
            extra[name] = text
        elif isinstance(old, list):
            old.append(text)
        else:
            extra[name] = [old, text]
    return values, extra


def read_export(stream: BinaryIO, ctx: ReadContext) -> Iterator[pa.Table]:
    builder = RowBuilder()
    buf = b""
    pos = 0
    line = 1
    entry_no = 0
    eof = False
    while True:
        if not eof:
            chunk = stream.read(READ_SIZE)
            if chunk:
                buf = buf[pos:] + chunk
                pos = 0
            else:
                eof = True
                buf = buf[pos:]
                pos = 0
                if buf and not buf.endswith(b"\n\n"):
                    # A stream cut after its last field still holds a whole entry.
                    buf += b"\n" if buf.endswith(b"\n") else b"\n\n"
        n = len(buf)
        while pos < n:
            if buf[pos] == 0x0A:  # stray blank line between entries
                pos += 1
                line += 1
                continue
            end = buf.find(b"\n\n", pos)
            fields: list[tuple[bytes, bytes]] | None = None
            if end >= 0:
                fields = []
                for ln in buf[pos:end].split(b"\n"):
                    name, sep, value = ln.partition(b"=")
                    if not sep:
                        fields = None  # a binary value: its bytes may hold "\n\n"
                        break
                    fields.append((name, value))
                nxt = end + 2
            if fields is None:
                try:
                    fields, nxt = _parse_slow(buf, pos)
                except _NeedMore:
                    if not eof:
                        break
                    # Cut off, or a length that runs past the end of the stream.
                    pos, line = _skip_entry(buf, pos, line, ctx, None)
                    continue
                except ValueError as exc:
                    pos, line = _skip_entry(buf, pos, line, ctx, str(exc))
                    continue
            first = line
            line += buf.count(b"\n", pos, nxt)
            values, extra = _entry(fields, ctx, first)
            if not values and extra is None:
                ctx.reject(first, "export: entry without fields", buf[pos:nxt])
            else:
                builder.add(entry_no, values, extra, first, line - 2)
                entry_no += 1
            pos = nxt
            if builder.n >= BATCH_ROWS:
                yield builder.table()
        if eof and pos >= len(buf):
            break
    ctx.lines = line - 1
    if builder.n:
        yield builder.table()
