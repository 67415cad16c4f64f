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
`time_created_ns`.
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


class Refused(ValueError):
    """A pickle that is not a Flight Recorder dump's data: a class, a call, garbage."""


class _Data(pickle.Unpickler):
    """Builtin values only: any global a pickle names (a class, a function such as
    os.system for its REDUCE) is refused before anything runs."""

    def find_class(self, module: str, name: str) -> object:
        raise Refused(f"the pickle names {module}.{name}: refused (a Flight Recorder dump "
                      "holds only builtin values)")  # fmt: skip


def sniff(head: bytes) -> str | None:
    """A dump's pickle, or its JSON form (`_dump_fr_trace_json`: one object, its keys in
    order, `comm_lib_version` and `entries` first)."""
    if len(head) > 2 and head[0] == 0x80 and head[1] in PROTOCOLS and any(k in head for k in KEYS):
        return "flight-recorder"
    if (
        head.lstrip()[:1] == b"{"
        and b'"entries":[' in head.replace(b" ", b"")[:4096]
        and (b'"comm_lib_version"' in head or b'"pg_config"' in head)
    ):
        return "flight-recorder"
    return None


def load(data: bytes) -> dict:
    """The dump's dict (raises Refused, with the reason in one line)."""
    try:
        obj = orjson.loads(data) if data.lstrip()[:1] == b"{" else _Data(io.BytesIO(data)).load()
    except Refused:
        raise
    except Exception as exc:  # a cut or corrupt dump: any of the readers' errors
        raise Refused(f"not a readable dump ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("entries", []), list):
        raise Refused("not a Flight Recorder dump (no dict with a list of entries)")
    return obj


def rank_of(name: str) -> int | None:
    """The rank a dump's file name says (torch writes `<prefix><rank>`)."""
    m = _RANK.search(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def _numel(sizes: object) -> int | None:
    if not isinstance(sizes, list):
        return None
    try:
        return sum(math.prod(int(d) for d in shape) for shape in sizes)
    except (TypeError, ValueError):
        return None


def entry_line(entry: dict, rank: int | None) -> tuple[str, int | None]:
    """One entry as the line the pattern reads, and its time (µs since the epoch)."""
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
    text = "flight recorder " + " ".join(
        f"{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in fields.items() if v is not None and str(v) != ""
    )  # fmt: skip
    created = entry.get("time_created_ns")
    when = created // 1000 if isinstance(created, int) and created > 0 else None
    return text, when


def entries(obj: dict) -> Iterator[tuple[int, object]]:
    """(index from 1, entry) of the dump's entries."""
    yield from enumerate(obj.get("entries", []), 1)
