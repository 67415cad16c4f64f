"""OpenTelemetry and Dynamo trace ingest against a short-iso-precise journal of the same
size (issue 54): bytes a second and peak memory (the process and its readers), each ingest
a fresh process into a fresh catalog; then one collector line of 100 MB.

    python3 bench/otlp.py [--mb 500] [--line-mb 100]

The journal is the head of bench/out/incident-1300000-v2.log (bench/generate.py makes
it); the traces are generated here in the collector's OTLP JSON (a request a line, 1,000
spans of SGLang's attributes each) and Dynamo's request_end records."""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

OUT = Path(__file__).parent / "out"
JOURNAL = OUT / "incident-1300000-v2.log"
SPAN_BYTES = 590  # a generated span's JSON, about
RUN = """
import resource, sys, time
import forensics
t = time.perf_counter()
forensics.ingest([sys.argv[1]], sys.argv[2], workers=1)
s = time.perf_counter() - t
mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(s, max(mine, kids) / 1e6)
"""


def _span(rng: random.Random, t_ns: int) -> dict:
    rid = f"{rng.getrandbits(128):032x}"
    return {"traceId": f"{rng.getrandbits(128):032x}", "spanId": f"{rng.getrandbits(64):016x}",
            "parentSpanId": "", "name": f"decode Req {rid[:8]}", "kind": 1,
            "startTimeUnixNano": str(t_ns), "endTimeUnixNano": str(t_ns + 5_000_000),
            "attributes": [{"key": "rid", "value": {"stringValue": rid}},
                           {"key": "module", "value": {"stringValue": "sglang::scheduler"}},
                           {"key": "bootstrap_room",
                            "value": {"stringValue": hex(rng.getrandbits(63))}},
                           {"key": "tp_rank", "value": {"intValue": "0"}},
                           {"key": "host_id", "value": {"stringValue": "a1b2c3d4e5f60718"}},
                           {"key": "pid", "value": {"intValue": "4242"}}],
            "status": {}}  # fmt: skip


def _request(rng: random.Random, n: int, t_ns: int) -> bytes:
    res = {"attributes": [{"key": "service.name", "value": {"stringValue": "sglang-decode"}},
                          {"key": "host.name", "value": {"stringValue": "decode-0"}}]}  # fmt: skip
    spans = [_span(rng, t_ns + i * 1_000_000) for i in range(n)]
    return orjson.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [
        {"scope": {"name": "sglang"}, "spans": spans}]}]})  # fmt: skip


def otlp_file(path: Path, size: int, per_line: int, lines: int | None = None) -> Path:
    if path.exists():
        return path
    rng, t, n = random.Random(1), 1_780_000_000_000_000_000, 0
    with path.open("wb") as f:
        while n < size and (lines is None or lines > 0):
            lines = None if lines is None else lines - 1
            line = _request(rng, per_line, t) + b"\n"
            f.write(line)
            n, t = n + len(line), t + per_line * 1_000_000
    return path


def dynamo_file(path: Path, size: int) -> Path:
    if path.exists():
        return path
    rng, t, n = random.Random(2), 1_780_000_000_000, 0
    with path.open("wb") as f:
        while n < size:
            rec = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                   "event_time_unix_ms": t, "event_source": "dynamo",
                   "request": {"request_id": f"{rng.getrandbits(128):032x}",
                               "x_request_id": f"{rng.getrandbits(128):032x}",
                               "input_tokens": 2048, "output_tokens": 256, "cached_tokens": 1024,
                               "request_received_ms": t - 900, "prefill_wait_time_ms": 12.5,
                               "prefill_time_ms": 180.25, "ttft_ms": 201.75,
                               "total_time_ms": 1250.5, "avg_itl_ms": 4.1, "kv_hit_rate": 0.5,
                               "kv_transfer_estimated_latency_ms": 8.75, "queue_depth": 3,
                               "worker": {"prefill_worker_id": 7587890123456789012,
                                          "decode_worker_id": 7587890123456789013,
                                          "decode_dp_rank": 1}}}  # fmt: skip
            line = orjson.dumps(rec) + b"\n"
            f.write(line)
            n, t = n + len(line), t + 10
    return path


def journal_head(path: Path, size: int) -> Path:
    if path.exists():
        return path
    with JOURNAL.open("rb") as src, path.open("wb") as f:
        n = 0
        for line in src:
            f.write(line)
            n += len(line)
            if n >= size:
                break
    return path


def ingest(path: Path) -> tuple[float, float]:
    d = Path(tempfile.mkdtemp(prefix="otlp-bench-"))
    try:
        got = subprocess.run([sys.executable, "-c", RUN, str(path), str(d / "b.duckdb")],
                             capture_output=True, check=True, text=True).stdout.split()  # fmt: skip
        return float(got[0]), float(got[1])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    ap.add_argument("--line-mb", type=int, default=100)
    a = ap.parse_args()
    size = a.mb << 20
    inputs = {
        "journal (short-iso-precise)": journal_head(OUT / f"journal-head-{a.mb}.log", size),
        "otlp-json": otlp_file(OUT / f"otlp-{a.mb}.jsonl", size, 1000),
        "dynamo-request-trace": dynamo_file(OUT / f"dynamo-{a.mb}.jsonl", size),
        "otlp-json, one line": otlp_file(
            OUT / f"otlp-line-{a.line_mb}mb.jsonl",
            a.line_mb << 20,
            (a.line_mb << 20) // SPAN_BYTES,
            lines=1,
        ),
    }
    rows = {}
    for name, path in inputs.items():
        t0 = time.perf_counter()
        s, gb = ingest(path)
        mb = path.stat().st_size / 2**20
        wall = time.perf_counter() - t0
        rows[name] = {"MB": round(mb, 1), "s": round(s, 2), "MB/s": round(mb / s, 1),
                      "peak_GB": round(gb, 2), "wall_s": round(wall, 1)}  # fmt: skip
    base = rows["journal (short-iso-precise)"]["MB/s"]
    for r in rows.values():
        r["x_journal"] = round(r["MB/s"] / base, 2)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
