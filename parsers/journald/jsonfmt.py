"""`journalctl -o json` (one object a line) and `-o json-seq` (RFC 7464, RS-prefixed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import orjson
import pyarrow as pa

from .context import ReadContext
from .schema import FIELD_MAP, RowBuilder, extra_value

BATCH_ROWS = 50_000


class _NotAValue(ValueError):
    """A json value journalctl never writes for a field (an object, a nested list…)."""


def _value(v: object) -> tuple[object, bool]:
    """A json field value as str/bytes (first of several), and whether it was null."""
    if v is None:
        return None, True
    if isinstance(v, bool):  # before int: a bool is an int to Python
        return ("true" if v else "false"), False
    if isinstance(v, int | float):
        return orjson.dumps(v).decode(), False
    if isinstance(v, list):
        if not v:
            return b"", False
        if all(type(b) is int for b in v):
            # journalctl renders non-text values as byte arrays
            if not all(0 <= b <= 255 for b in v):  # type: ignore[operator]
                raise _NotAValue("byte array with values outside 0-255")
            return bytes(v), False  # type: ignore[arg-type]
        first = v[0]
        if isinstance(first, str | list):
            return _value(first)[0], False  # a field present several times: keep the first
        raise _NotAValue(f"list of {type(first).__name__}")
    if isinstance(v, str):
        return v, False
    raise _NotAValue(type(v).__name__)


def _extra_value(v: object) -> object:
    if isinstance(v, list):
        if v and all(type(b) is int and 0 <= b <= 255 for b in v):
            return extra_value(bytes(v))  # type: ignore[arg-type]
        return [_extra_value(x) for x in v]
    return v


def read_json(stream: BinaryIO, ctx: ReadContext) -> Iterator[pa.Table]:
    builder = RowBuilder()
    entry_no = 0
    line_no = 0
    loads = orjson.loads
    fmap = FIELD_MAP
    for raw in stream:
        line_no += 1
        text = raw.strip(b"\x1e\r\n\t ")
        if not text:
            continue
        try:
            obj = loads(text)
        except orjson.JSONDecodeError as exc:
            ctx.reject(line_no, f"json: {str(exc).split(':')[0]}", raw)
            continue
        if not isinstance(obj, dict):
            ctx.reject(line_no, "json: not an object", raw)
            continue
        values: dict[str, object] = {}
        extra: dict[str, object] | None = None
        truncated = False
        bad = None
        for k, v in obj.items():
            col = fmap.get(k)
            if col is not None:
                if type(v) is str:
                    values[col] = v
                    continue
                try:
                    val, null = _value(v)
                except _NotAValue as exc:
                    bad = f"json: {k[:40]} is not a journald value ({exc})"
                    break
                if null:
                    truncated = True  # over journalctl's 4096-byte limit without --all
                else:
                    values[col] = val
            elif not k.startswith("__"):
                if extra is None:
                    extra = {}
                extra[k] = _extra_value(v)
                truncated = truncated or v is None
        if bad is not None:
            ctx.reject(line_no, bad, raw)
            continue
        if truncated:
            values["_truncated"] = True
        builder.add(entry_no, values, extra, line_no, line_no)
        entry_no += 1
        if builder.n >= BATCH_ROWS:
            yield builder.table()
    ctx.lines = line_no
    if builder.n:
        yield builder.table()
