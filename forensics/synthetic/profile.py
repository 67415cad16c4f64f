"""A torch-profiler-shaped (Kineto JSON) trace of the demo's decode host, for opening
beside `forensics trace`: one forward pass per decode step, on decode's own clock.

Kineto writes event times in µs after `baseTimeNanoseconds` (the host's wall clock);
this file keeps that form, so `forensics trace --profile` places it as it would a real
profile recorded on that host.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from .incident import Entry

_STEP = re.compile(r"forensics:step step=(\d+) bs=(\d+)")
FORWARD_US = 900  # a decode forward pass of the demo's small batches


def write_profile(entries: list[Entry], path: Path, host: str) -> Path:
    steps = []
    for e in entries:
        m = _STEP.search(e.message) if e.host == host and isinstance(e.message, str) else None
        if m:
            steps.append((e.ts_us, int(m[1]), int(m[2])))
    base_ns = (min(s[0] for s in steps) // 1_000_000 - 60) * 1_000_000_000 if steps else 0
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "scheduler"}},
    ]
    for ts_us, step, bs in steps:
        start = ts_us * 1000 - base_ns  # the step record is logged after its forward pass
        events.append({"ph": "X", "cat": "user_annotation", "name": "decode forward",
                       "pid": 1, "tid": 1, "ts": (start / 1000) - FORWARD_US, "dur": FORWARD_US,
                       "args": {"step": step, "bs": bs}})  # fmt: skip
    doc = {"schemaVersion": 1, "deviceProperties": [], "host_name": host,
           "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns, "traceEvents": events,
           "traceName": path.name}  # fmt: skip
    path.write_bytes(orjson.dumps(doc))
    return path
