"""The reproducer harness's results: one row per request (JSON lines or CSV).

Columns: `session`, `round`, `rid`, `corrupted` (or `ok`), `reason`, `start`/`end` (epoch
seconds or ISO 8601), `concurrency`, optional `room`; other columns are kept in `extra`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable
from typing import BinaryIO

import orjson
import pyarrow as pa

from .journald.context import ReadContext

RESULT_FORMATS = ("results-jsonl", "results-csv")
SCHEMA = pa.schema(
    [
        ("line", pa.int64()), ("session", pa.string()), ("round", pa.int64()),
        ("rid", pa.string()), ("room", pa.uint64()), ("corrupted", pa.bool_()),
        ("reason", pa.string()), ("start_us", pa.int64()), ("end_us", pa.int64()),
        ("concurrency", pa.int64()), ("extra", pa.string()),
    ]
)  # fmt: skip
_KNOWN = {
    "session",
    "round",
    "rid",
    "room",
    "corrupted",
    "ok",
    "reason",
    "start",
    "end",
    "concurrency",
}
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def sniff_results(head: bytes) -> str | None:
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if first.startswith(b"{"):
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError:
            return None
        if isinstance(obj, dict) and "rid" in obj and "session" in obj and "MESSAGE" not in obj:
            return "results-jsonl"
        return None
    cols = {c.strip().lower() for c in first.decode("utf-8", "replace").split(",")}
    if {"session", "rid"} <= cols and ({"corrupted", "ok"} & cols):
        return "results-csv"
    return None


class _Bad(ValueError):
    pass


def _bool(v: object, name: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float):
        return bool(v)
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise _Bad(f"{name} is not true/false: {v!r}")


def _int(v: object, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _Bad(f"{name} is not an integer: {v!r}") from None


def _time_us(v: object, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        return round(float(v) * 1_000_000)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    try:
        t = dt.datetime.fromisoformat(str(v))
    except ValueError:
        raise _Bad(f"{name} is neither epoch seconds nor ISO 8601: {v!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)  # a time without a zone is read as UTC
    return round(t.timestamp() * 1_000_000)


def _row(obj: dict, line: int) -> dict:
    rid = obj.get("rid")
    if rid in (None, ""):
        raise _Bad("no rid")
    if obj.get("session") in (None, ""):
        raise _Bad("no session")
    if "corrupted" in obj:
        corrupted = _bool(obj["corrupted"], "corrupted")
    elif "ok" in obj:
        corrupted = not _bool(obj["ok"], "ok")
    else:
        raise _Bad("neither corrupted nor ok")
    room = _int(obj.get("room"), "room")
    if room is not None and not 0 <= room < 1 << 63:
        raise _Bad(f"room is not an unsigned 63-bit number: {room}")
    extra = {k: v for k, v in obj.items() if k not in _KNOWN}
    return {
        "line": line, "session": str(obj["session"]), "round": _int(obj.get("round"), "round"),
        "rid": str(rid), "room": room, "corrupted": corrupted,
        "reason": (str(obj["reason"]) if obj.get("reason") not in (None, "") else None),
        "start_us": _time_us(obj.get("start"), "start"), "end_us": _time_us(obj.get("end"), "end"),
        "concurrency": _int(obj.get("concurrency"), "concurrency"),
        "extra": orjson.dumps(extra).decode() if extra else None,
    }  # fmt: skip


def _objects(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterable[tuple[int, object]]:
    # Results files are small (one row per request): read whole, and leave the stream
    # open for the caller's digest.
    text = stream.read().decode("utf-8", "replace")
    if fmt == "results-csv":
        for i, rec in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):
            yield i, {k.strip().lower(): v for k, v in rec.items() if k is not None}
        return
    for i, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield i, orjson.loads(raw)
        except orjson.JSONDecodeError:
            ctx.reject(i, "results: not JSON", raw.rstrip("\n"))


def read_results(stream: BinaryIO, fmt: str, ctx: ReadContext) -> pa.Table:
    rows = []
    for line, obj in _objects(stream, fmt, ctx):
        if not isinstance(obj, dict):
            ctx.reject(line, "results: not an object", str(obj))
            continue
        try:
            rows.append(_row(obj, line))
        except _Bad as exc:
            ctx.reject(line, f"results: {exc}", orjson.dumps(obj, default=str).decode())
    ctx.lines = max((r["line"] for r in rows), default=0)
    return pa.Table.from_pylist(rows, schema=SCHEMA)
