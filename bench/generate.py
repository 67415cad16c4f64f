"""A large incident journal for the benchmark: export stream -> real .journal -> renderings.

One merged journal of a prefill and a decode host (what `journalctl -m` over both
hosts' copied directories prints), with the line mix of an instrumented SGLang PD
deployment under load: --log-requests lines carrying prompts, batch stats, checksum,
step and canary records, HTTP access lines, one non-UTF-8 message.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

from forensics.probes.lines import pages, record
from forensics.synthetic.journal_writer import render, write_journal

T0 = 1_795_935_600_000_000
WORDS = [
    "the",
    "tool",
    "call",
    "returned",
    "a",
    "JSON",
    "object",
    "with",
    "the",
    "fields",
    "name",
    "arguments",
    "and",
    "id;",
    "the",
    "assistant",
    "then",
    "summarised",
    "the",
    "file",
    "listing",
    "and",
    "asked",
    "for",
    "the",
    "next",
    "directory",
]


def _field(name: bytes, value: bytes) -> bytes:
    if b"\n" in value or any(c < 32 and c != 9 for c in value):
        return name + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"
    return name + b"=" + value + b"\n"


def _cycle(rng: random.Random, k: int, step: int, prompt_words: int) -> list[tuple[int, str]]:
    """One request's lines as (host index, message)."""
    rid = f"{rng.getrandbits(128):032x}"
    room = rng.getrandbits(63)
    prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
    h = f"{rng.getrandbits(64):016x}"
    ts = "[2026-11-29 07:00:00 TP0]"
    recv = (f"{ts} Receive: obj=GenerateReqInput(rid='{rid}', text='{prompt}', "
            f"bootstrap_host='10.0.4.11', bootstrap_port=8998, bootstrap_room={room}, stream=True)")  # fmt: skip
    out = [
        (0, recv),
        (0, f"{ts} Prefill batch, #new-seq: 1, #new-token: {rng.randint(500, 9000)}, #cached-token: "
            f"{rng.randint(0, 4000)}, token usage: 0.31, #running-req: 0, #queue-req: 2, "
            f"#prealloc-req: 0, #inflight-req: 1, input throughput (token/s): 5123.55"),
        (0, f"forensics:checksum side=src room={room} rid={rid} buf=index_k layer=all tp=0 "
            f"dtype=fp8 nbytes=262144 head={h} tail={h[::-1]} full={h[3:]}{h[:3]}"),
        (1, recv),
        (1, f"forensics:checksum side=dst room={room} rid={rid} buf=index_k layer=all tp=0 "
            f"dtype=fp8 nbytes=262144 head={h} tail={h[::-1]} full={h[3:]}{h[:3]}"),
    ]  # fmt: skip
    for s in range(step, step + 4):
        out.append((1, f"forensics:step step={s} bs=48 rids={rid} rooms={room}"))
        for layer in (0, 30):
            out.append((1, f"forensics:canary step={s} layer={layer} bs=48 mode=replay "
                           f"expected={s % 997},{(s + 1) % 997} changed={s % 997},{(s + 1) % 997}"))  # fmt: skip
    out += [
        (1, f"{ts} Decode batch, #running-req: 48, #token: 183552, token usage: 0.22, "
            f"pre-allocated usage: 0.04, #prealloc-req: 3, #transfer-req: 2, #retracted-req: 0, "
            f"cuda graph: True, gen throughput (token/s): 1893.20, #queue-req: 0"),
        (1, f"{ts} Finish: obj=GenerateReqInput(rid='{rid}', bootstrap_room={room}), "
            f"out={{'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop'}}}}}}"),
        (1, f'{ts} INFO:     127.0.0.1:{40000 + k % 20000} - "POST /v1/chat/completions HTTP/1.1" 200 OK'),
    ]  # fmt: skip
    return out


HOSTS = [
    (b"prefill-0", b"sglang-prefill.service", b"2001", b"6f1c0d9a2b3e4f5a6b7c8d9e0f1a2b3c"),
    (b"decode-0", b"sglang-decode.service", b"3001", b"0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"),
]


def _decode_cycle(rng: random.Random, k: int, step: int) -> list[tuple[int, str]]:
    """One request on a canary-instrumented decode host: 94 % of its lines are records
    (a step record and a canary record per layer group for each of 4 decode steps), each
    written as forensics.probes writes it."""
    rid = f"{rng.getrandbits(128):032x}"
    room = rng.getrandbits(63)
    h = f"{rng.getrandbits(64):016x}"
    ts = "[2026-11-29 07:00:00 TP0]"
    out = [
        (1, f"{ts} Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_room={room}, stream=True)"),
        (1, record("checksum", {
            "side": "dst", "room": room, "rid": rid, "buf": "index_k", "layer": "all", "tp": 0,
            "dtype": "fp8", "nbytes": 262144, "head": h, "tail": h[::-1], "full": h[3:] + h[:3],
        })),
    ]  # fmt: skip
    for s in range(step, step + 4):
        out.append((1, record("step", {"step": s, "bs": 48, "rids": rid, "rooms": room})))
        base = (s * 2) % 4000
        expected = [base, base + 1]
        for layer in range(0, 64, 4):
            # One write in 500 lands outside the step's pages (aliasing).
            changed = expected + ([base + 77] if rng.random() < 0.002 else [])
            out.append((1, record("canary", {
                "step": s, "layer": layer, "bs": 48, "mode": "replay",
                "expected": pages(expected), "changed": pages(changed),
                "unexpected": pages(set(changed) - set(expected)),
            })))  # fmt: skip
    out += [
        (1, f"{ts} Decode batch, #running-req: 48, #token: 183552, token usage: 0.22, "
            f"cuda graph: True, gen throughput (token/s): 1893.20, #queue-req: 0"),
        (1, f'{ts} INFO:     127.0.0.1:{40000 + k % 20000} - "POST /generate HTTP/1.1" 200 OK'),
    ]  # fmt: skip
    return out


SHAPES = {"mixed": "v2", "decode": "decode-v2"}  # shape -> file name tag


def write_export(
    path: Path, lines: int, prompt_words: int = 560, seed: int = 1, shape: str = "mixed"
) -> int:
    """An export stream of `lines` entries; returns the count written."""
    rng = random.Random(seed)
    n = 0
    k = 0
    step = 0
    ts = T0
    with open(path, "wb", buffering=1 << 20) as fh:
        while n < lines:
            cycle = (
                _cycle(rng, k, step, prompt_words)
                if shape == "mixed"
                else _decode_cycle(rng, k, step)
            )
            for host, msg in cycle:
                if n >= lines:
                    break
                ts += rng.randint(50, 400)
                h, unit, pid, boot = HOSTS[host]
                raw = msg.encode()
                if n == lines // 2:
                    raw = b"tokenizer emitted invalid bytes: \xff\xfe"
                fh.write(
                    b"__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n" % (ts, ts - T0 + 9_000_000)
                    + b"_BOOT_ID=" + boot + b"\n_HOSTNAME=" + h + b"\n_SYSTEMD_UNIT=" + unit
                    + b"\nSYSLOG_IDENTIFIER=python3\n_PID=" + pid + b"\n_TRANSPORT=stdout\nPRIORITY=6\n"
                    + _field(b"MESSAGE", raw) + b"\n"
                )  # fmt: skip
                n += 1
            k += 1
            step += 4
    return n


def build(out: Path, lines: int, shape: str = "mixed", json: bool = True) -> dict[str, Path]:
    """Cached renderings of an incident of `lines` entries: short-iso-precise, and json
    for the mixed shape unless `json` is false (`decode`: a record-heavy decode host,
    short-iso-precise only)."""
    out.mkdir(parents=True, exist_ok=True)
    tag = SHAPES[shape]
    stem = out / f"incident-{lines}-{tag}"
    files = {"short-iso-precise": Path(f"{stem}.log")}
    if shape == "mixed" and json:
        files["json"] = Path(f"{stem}.json")
    if all(p.exists() for p in files.values()):
        return files
    export = Path(f"{stem}.export")
    write_export(export, lines, shape=shape)
    jdir = out / f"journal-{lines}-{tag}"
    for old in jdir.glob("*.journal"):
        old.unlink()
    journals = write_journal(export, jdir / "incident.journal")
    export.unlink()
    for fmt, path in files.items():
        render(journals, fmt, path)
    return files
