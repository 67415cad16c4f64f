"""The reproducer harness's results: one row per request (JSON lines or CSV).

Columns: `session`, `round`, `rid`, `corrupted` (or `ok`), `reason`, `status`, `start`/`end`
(epoch seconds or ISO 8601), `concurrency`, optional `room`; other columns are kept in
`extra`. A `status` of `http_error`, `timeout` or `uncompared` (`forensics.statuses.UNJUDGED`)
marks a request without a verdict: rates leave it out of their denominator.

JSON lines may carry run headers (what `forensics repro` writes): a line
`{"forensics_run": NAME, "tags": {...}, "url": ..., ...}` puts the rows after it in run NAME,
its fields becoming the run's tags; `{"forensics_run_end": NAME, "interrupted": B, …}`
adds `interrupted`. Rows before any header take ingest's `--run`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from typing import BinaryIO

import orjson
import pyarrow as pa

from .isotime import iso_us
from .journald.context import ReadContext
from .journald.schema import TS_MAX_US
from .pyvalues import table
from .tables import RESULTS

RESULT_FORMATS = ("results-jsonl", "results-csv")
# The results table's declared columns but the source (ingest stamps it).
SCHEMA = RESULTS.arrow(skip=("source_id",))
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
    "status",
}
# Header fields kept as the run's tags (besides its own "tags").
_HEADER_TAGS = ("url", "model", "scenario", "scenario_sha256", "seed", "sessions", "rounds",
                "golden", "stream", "temperature", "timeout_s", "retries", "solo",
                "dropped_fields", "meta_info")  # fmt: skip
# Keys of SGLang's server info that are runtime state, not configuration (repro leaves them
# out of its header; a header written by other tools may hold them)
_RUNTIME = frozenset({
    "internal_states", "last_gen_throughput", "memory_usage", "load", "status", "uptime",
    "num_running_reqs", "num_waiting_reqs", "num_queue_reqs", "token_usage", "timestamp",
})  # fmt: skip
_SIDES = ("prefill", "decode")
RUN_HEADER, RUN_END = "forensics_run", "forensics_run_end"
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


JOURNAL_KEYS = {"MESSAGE", "__CURSOR", "__REALTIME_TIMESTAMP", "_HOSTNAME", "_BOOT_ID"}
_RESULT_KEYS = {"session", "rid", "corrupted", "ok"}
INT64 = (-(1 << 63), (1 << 63) - 1)


class NotResults(ValueError):
    """Looks like harness results, but cannot be read as them."""


def sniff_results(head: bytes) -> str | None:
    """results-jsonl / results-csv, or None when the head is something else (a journal)."""
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if first.startswith(b"{"):
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(obj, dict) or JOURNAL_KEYS & obj.keys():
            return None
        if RUN_HEADER in obj:
            return "results-jsonl"
        # Not a journal entry: with any key of a result, it is one (rows that lack a rid
        # or a verdict are quarantined with that reason, not stored as journal entries).
        return "results-jsonl" if _RESULT_KEYS & obj.keys() else None
    cols = {c.strip().strip('"').lower() for c in first.decode("utf-8", "replace").split(",")}
    if len(cols & _RESULT_KEYS) >= 2:
        if not {"session", "rid"} <= cols or not {"corrupted", "ok"} & cols:
            have = ", ".join(sorted(cols & _RESULT_KEYS))
            raise NotResults(
                f"a CSV header with {have} looks like harness results, but results need "
                "session, rid and corrupted (or ok)"
            )
        return "results-csv"
    return None


class _Bad(ValueError):
    pass


def _bool(v: object, name: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int | float) and v in (0, 1):
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
        out = int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise _Bad(f"{name} is not an integer: {v!r}") from None
    if not INT64[0] <= out <= INT64[1] or (isinstance(v, float) and v != out):
        raise _Bad(f"{name} is not a 64-bit integer: {v!r}")
    return out


def _time_us(v: object, name: str) -> int | None:
    if v is None or v == "":
        return None
    try:
        seconds = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    else:
        if not math.isfinite(seconds) or not 0 <= seconds * 1_000_000 <= TS_MAX_US:
            raise _Bad(f"{name} is not a time between 1970 and 9999: {v!r}")
        return round(seconds * 1_000_000)
    try:
        return iso_us(str(v))  # a time without a zone is read as UTC
    except ValueError as exc:
        why = "neither epoch seconds nor ISO 8601" if str(exc) == "not ISO 8601" else exc
        raise _Bad(f"{name} is {why}: {v!r}") from None


def _row(obj: dict, line: int, run: str | None) -> dict:
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
    start, end = _time_us(obj.get("start"), "start"), _time_us(obj.get("end"), "end")
    if start is not None and end is not None and end < start:
        raise _Bad("end is before start")
    status = obj.get("status")
    return {
        "line": line, "run": run,
        "status": str(status) if status not in (None, "") else None,
        "session": str(obj["session"]), "round": _int(obj.get("round"), "round"),
        "rid": str(rid), "room": room, "corrupted": corrupted,
        "reason": (str(obj["reason"]) if obj.get("reason") not in (None, "") else None),
        "start_us": start, "end_us": end,
        "concurrency": _int(obj.get("concurrency"), "concurrency"),
        "extra": orjson.dumps(extra).decode() if extra else None,
    }  # fmt: skip


def _objects(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterable[tuple[int, object]]:
    # Results files are small (one row per request): read whole, and leave the stream
    # open for the caller's digest.
    text = stream.read().decode("utf-8", "replace")
    if fmt == "results-csv":
        for i, rec in enumerate(csv.DictReader(io.StringIO(text, newline="")), start=2):
            ctx.lines = i
            yield i, {k.strip().lower(): v for k, v in rec.items() if k is not None}
        return
    # Lines end at "\n" only: str.splitlines() would also cut at U+0085, U+2028, … inside
    # JSON strings (found by the fuzz test).
    for i, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        ctx.lines = i
        try:
            yield i, orjson.loads(raw)
        except orjson.JSONDecodeError:
            ctx.reject(i, "results: not JSON", raw.rstrip("\r"))


def _tag(v: object) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return v if isinstance(v, str) else orjson.dumps(v).decode()


def server_tags(info: dict) -> dict[str, str]:
    """A server's configuration as run tags (`server.ARG`, a PD router's `server.prefill.ARG`
    and `server.decode.ARG`, several servers' differing values joined by ` | `), so that
    `compare` shows the arguments that differ between runs without anyone typing tags."""
    sides = {s: info[s] for s in _SIDES if isinstance(info.get(s), list)}
    if not sides:
        return {f"server.{k}": _tag(v) for k, v in info.items() if k not in _RUNTIME}
    out = {}
    for side, servers in sides.items():
        values: dict[str, list[str]] = {}
        for one in servers:
            for k, v in one.items() if isinstance(one, dict) else ():
                if k not in _RUNTIME and _tag(v) not in values.setdefault(k, []):
                    values[k].append(_tag(v))
        out |= {f"server.{side}.{k}": " | ".join(vs) for k, vs in values.items()}
    return out


def _header(obj: dict, runs: dict[str, dict[str, str]]) -> str:
    """The run a header line opens (its tags into `runs`); _Bad when it names none."""
    name = obj.get(RUN_HEADER) if RUN_HEADER in obj else obj.get(RUN_END)
    if not isinstance(name, str) or not name.strip():
        raise _Bad("run header without a name")
    tags = runs.setdefault(name, {})
    if RUN_HEADER in obj:
        own = obj.get("tags") or {}
        if not isinstance(own, dict):
            raise _Bad("run header tags are not an object")
        tags.update({k: _tag(obj[k]) for k in _HEADER_TAGS if obj.get(k) is not None})
        if isinstance(obj.get("server_info"), dict):
            tags.update(server_tags(obj["server_info"]))
        tags.update({str(k): _tag(v) for k, v in own.items()})
    else:
        tags.update({k: _tag(obj[k]) for k in ("interrupted",) if k in obj})
    return name


def read_results(
    stream: BinaryIO, fmt: str, ctx: ReadContext, runs: dict[str, dict[str, str]] | None = None
) -> pa.Table:
    """The rows (`run` null where no header named one); run headers' tags into `runs`."""
    rows = []
    first_line: dict[str, int] = {}  # rid -> line of its first result
    headers: dict[str, dict[str, str]] = {} if runs is None else runs
    run: str | None = None
    for line, obj in _objects(stream, fmt, ctx):
        if not isinstance(obj, dict):
            ctx.reject(line, "results: not an object", str(obj))
            continue
        try:
            if RUN_HEADER in obj or RUN_END in obj:
                name = _header(obj, headers)
                run = name if RUN_HEADER in obj else run
                ctx.markers += 1  # stored as the run's tags, not as a row
                continue
            row = _row(obj, line, run)
            if row["rid"] in first_line:
                raise _Bad(f"rid {row['rid'][:40]!r} already on line {first_line[row['rid']]}")
        except _Bad as exc:
            ctx.reject(line, f"results: {exc}", orjson.dumps(obj, default=str).decode())
            continue
        first_line[row["rid"]] = line
        rows.append(row)
    return table(rows, SCHEMA)  # not from_pylist: it imports pandas
