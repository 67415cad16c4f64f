"""PyTorch's Flight Recorder dumps (TORCH_NCCL_TRACE_BUFFER_SIZE: the last collectives of
each rank, written on a watchdog timeout, one file a rank, `nccl_trace_rank_N`), read
with a restricted unpickler: a dump is data, never code. The format is torch's
(torch/csrc/distributed/c10d/FlightRecorder.hpp, version 2.x): a dict with `version`,
`pg_config`, `pg_status` and `entries`, each entry a dict of `record_id`, `pg_id`,
`process_group` (name, description), `collective_seq_id`, `p2p_seq_id`, `op_id`,
`profiling_name` (`nccl:all_reduce`), `input_sizes`, `output_sizes`, `time_created_ns`,
`timeout_ms`, `state` (scheduled, started, completed), `retired`, `is_p2p`, `frames`.

Each entry becomes one line of text (`flight recorder rank=… pg=… seq=… op=… state=…`)
that the `flight_recorder_entry` pattern reads into `collectives`, timed by its
`time_created_ns`; each process group of `pg_config` (torch 2.10: its members) and
`pg_status` one line more (`flight recorder group rank=… pg=… ranks=0,1,2 last_…=…`),
read by `flight_recorder_group` into `collectives` with state `group`.
"""

from __future__ import annotations

import io
import math
import pickle
import re
from collections.abc import Iterator

import orjson

PROTOCOLS = range(2, 6)
KEYS = (b"entries", b"pg_config", b"version")  # one is in a dump's first bytes
_RANK = re.compile(r"rank_?(\d+)")
_RANKS = re.compile(r"-?\d+")
MAX_RANKS_CHARS = 1 << 20  # a group's member list read at most (a million ranks' digits)
MAX_DUMP_BYTES = 256 << 20  # torch's buffer holds 2,000 entries by default: a few MB
MAX_DEPTH = 64  # levels of a value rendered; deeper is said, not walked
VALUE_CHARS = 200  # a rendered value's characters, as the named values keep
MAX_SHAPE_DIMS = 4096  # shapes (and dimensions a shape) counted into numel
DEEP = f"<past_{MAX_DEPTH}_levels>"  # one word: the pattern reads a value to a space
MIN_NS, MAX_NS = 946_684_800 * 10**9, 253_402_300_800 * 10**9  # 2000 to 9999


class Refused(ValueError):
    """A pickle that is not a Flight Recorder dump's data: a class, a call, garbage."""


class _Data(pickle.Unpickler):
    """Builtin values only: any global a pickle names (a class, a function such as
    os.system for its REDUCE) is refused before anything runs."""

    def find_class(self, module: str, name: str) -> object:
        raise Refused(f"the pickle names {module}.{name}: refused (a Flight Recorder dump "
                      "holds only builtin values)")  # fmt: skip


def sniff(head: bytes) -> str | None:
    """A dump's pickle, or its JSON form (`_dump_fr_trace_json`: one document whose top
    level holds `entries` and `version`). Judged by structure: a first line that is a
    whole JSON object with more lines after it is a JSON-lines log, whatever keys it
    names."""
    if len(head) > 2 and head[0] == 0x80 and head[1] in PROTOCOLS and any(k in head for k in KEYS):
        return "flight-recorder"
    if head.lstrip()[:1] != b"{":
        return None
    first, _, rest = head.lstrip().partition(b"\n")
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:  # one long line cut by the window, or pretty-printed
        cut = b'"entries":[' in head.replace(b" ", b"")[:4096]
        keys = b'"comm_lib_version"' in head or b'"pg_config"' in head
        return "flight-recorder" if cut and keys else None
    whole = isinstance(obj, dict) and not rest.strip()
    return "flight-recorder" if whole and _dump_keys(obj) else None


def _dump_keys(obj: dict) -> bool:
    return isinstance(obj.get("entries"), list) and "version" in obj


def load(data: bytes) -> tuple[dict, int]:
    """The dump's dict and how many bytes follow its end (raises Refused, with the reason
    in one line). A dump over MAX_DUMP_BYTES is refused before it is read."""
    if len(data) > MAX_DUMP_BYTES:
        raise Refused(f"a dump of {len(data):,} bytes, over the {MAX_DUMP_BYTES >> 20} MB a "
                      "dump may hold")  # fmt: skip
    after = 0
    try:
        if data.lstrip()[:1] == b"{":
            obj = orjson.loads(data)
        else:
            raw = io.BytesIO(data)
            obj = _Data(raw).load()
            after = len(data) - raw.tell()
    except Refused:
        raise
    except Exception as exc:  # a cut or corrupt dump: any of the readers' errors
        raise Refused(f"not a readable dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("entries", []), list):
        raise Refused("not a Flight Recorder dump (no dict with a list of entries)")
    return obj, after


def rank_of(name: str) -> int | None:
    """The rank a dump's file name says (torch writes `<prefix><rank>`)."""
    m = _RANK.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def render(v: object, budget: int = VALUE_CHARS) -> str:
    """A value as text of at most `budget` characters (then `…`), at most MAX_DEPTH levels
    deep: a value that refers to one list many times costs its expansion, stopped where
    the budget ends, never its whole (2⁸⁰ leaves in a pickle of 1.6 KB)."""
    out: list[str] = []
    left = [budget]

    def put(text: str) -> bool:
        out.append(text[: left[0]])
        left[0] -= len(text)
        return left[0] > 0

    def walk(x: object, depth: int) -> bool:
        if depth > MAX_DEPTH:
            return put(DEEP)
        if isinstance(x, bool) or x is None:
            return put(str(x).lower() if isinstance(x, bool) else "None")
        if isinstance(x, int):
            bits = x.bit_length()
            return put(str(x) if bits <= 256 else f"<an integer of {bits} bits>")
        if isinstance(x, list | tuple | set | frozenset | dict):
            return walk_items(x, depth)
        if isinstance(x, str) and depth == 0:
            return put(x)
        return put(repr(x[: left[0] + 1] if isinstance(x, str) else x)[: left[0] + 1])

    def walk_items(x: list | tuple | set | frozenset | dict, depth: int) -> bool:
        pairs = isinstance(x, dict)
        if not put("{" if pairs else "["):
            return False
        for i, item in enumerate(x.items() if pairs else x):  # type: ignore[union-attr]
            if i and not put(", "):
                return False
            if pairs and not (walk(item[0], depth + 1) and put(": ")):
                return False
            if not walk(item[1] if pairs else item, depth + 1):
                return False
        return put("}" if pairs else "]")

    if not walk(v, 0):
        return "".join(out)[:budget] + "…"
    return "".join(out)


def _numel(sizes: object) -> int | None:
    """Elements of a list of shapes (None: not one, or one past MAX_SHAPE_DIMS values)."""
    if not isinstance(sizes, list) or len(sizes) > MAX_SHAPE_DIMS:
        return None
    total = 0
    for shape in sizes:
        if not isinstance(shape, list | tuple) or len(shape) > MAX_SHAPE_DIMS:
            return None
        dims = [d for d in shape if isinstance(d, int) and not isinstance(d, bool)]
        if len(dims) < len(shape) or any(not 0 <= d < 1 << 63 for d in dims):
            return None
        total += math.prod(dims)
    return total


def time_us(v: object) -> int | None:
    """µs since the epoch of a `time_created_ns` (None: no time; a boolean is none)."""
    if isinstance(v, bool) or not isinstance(v, int) or not MIN_NS < v < MAX_NS:
        return None
    return v // 1000


def entry_line(entry: dict, rank: int | None) -> tuple[str, int | None, bool]:
    """One entry as the line the pattern reads, its time (µs since the epoch), and whether
    a value was cut (past VALUE_CHARS or MAX_DEPTH)."""
    name = entry.get("process_group")
    pg_name = name[0] if isinstance(name, list | tuple) and name else None
    fields = {
        "rank": rank, "pg": entry.get("pg_id"), "pg_name": pg_name,
        "seq": entry.get("collective_seq_id"), "p2p_seq": entry.get("p2p_seq_id"),
        "op_id": entry.get("op_id"), "op": entry.get("profiling_name"),
        "state": entry.get("state"), "timeout_ms": entry.get("timeout_ms"),
        "retired": entry.get("retired"), "is_p2p": entry.get("is_p2p"),
        "numel_in": _numel(entry.get("input_sizes")),
        "numel_out": _numel(entry.get("output_sizes")),
    }  # fmt: skip
    shown = [(k, render(v)) for k, v in fields.items() if v is not None]
    text = "flight recorder " + " ".join(f"{k}={v}" for k, v in shown if v != "")
    cut = any(v.endswith("…") or DEEP in v for _, v in shown)
    return text, time_us(entry.get("time_created_ns")), cut


def group_lines(obj: dict, rank: int | None) -> list[str]:
    """Each process group of the dump (`pg_config`, torch 2.10: its members as a string of
    a list, `"[0, 1, 2]"`; `pg_status`: its last enqueued, started and completed
    collective) as the line the `flight_recorder_group` pattern reads."""
    config, status = obj.get("pg_config"), obj.get("pg_status")
    if not isinstance(config, dict):
        return []
    status = status if isinstance(status, dict) else {}
    out = []
    for key, cfg in list(config.items())[:MAX_SHAPE_DIMS]:
        cfg = cfg if isinstance(cfg, dict) else {}
        # pg_config is keyed by the group's name, pg_status by its id: one group each (the
        # default group, named "" by gloo) is the same group
        sid = next(iter(status)) if key not in status and len(config) == len(status) == 1 else key
        members = _RANKS.findall(render(cfg.get("ranks"), MAX_RANKS_CHARS))
        fields = {
            "rank": rank,
            "pg": sid if str(sid).isdigit() else None,
            "pg_name": cfg.get("name") or None,
            "ranks": ",".join(members) or None,
        }
        seen = status.get(sid) if isinstance(status.get(sid), dict) else {}
        for name in ("enqueued", "started", "completed"):
            value = seen.get(f"last_{name}_collective")
            fields[f"last_{name}"] = value if _RANKS.fullmatch(str(value)) else None
        out.append("flight recorder group " + " ".join(
            f"{k}={render(v)}" for k, v in fields.items() if v is not None))  # fmt: skip
    return out


def entries(obj: dict) -> Iterator[tuple[int, object]]:
    """(index from 1, entry) of the dump's entries."""
    yield from enumerate(obj.get("entries", []), 1)
