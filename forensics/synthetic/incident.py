"""A synthetic PD-disaggregation incident with a known truth.

Prefill and decode hosts log SGLang's own lines plus the fork's `forensics:` records
(checksums, canaries, decode steps); the reproducer harness writes one result per
request. Some rooms are planted bad (partial, stale, mismatch, missing), a canary burst
writes pages it should not, and the requests in those are marked corrupted. The demo,
the tests and the benchmark all draw their inputs from here.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .journal_writer import export_entry

T0_US = 1_795_935_600_000_000  # 2026-11-29 07:00:00 UTC
PREFILL_BOOT = "6f1c0d9a2b3e4f5a6b7c8d9e0f1a2b3c"
DECODE_BOOT = "0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d"


@dataclass
class Entry:
    ts_us: int
    mono_us: int
    boot_id: str
    host: str
    unit: str
    ident: str
    pid: int
    message: str | bytes
    priority: int = 6
    extra: dict[str, str] = field(default_factory=dict)


@dataclass
class Incident:
    prefill: list[Entry]
    decode: list[Entry]
    results: list[dict]
    truth: dict  # what was planted: room verdicts, burst steps, corrupted rids, offset
    # decode's --export-metrics-to-file records: file name -> JSON lines (stock only)
    metrics: dict[str, list[str]] = field(default_factory=dict)


def _sglang(ts_us: int, text: str, rank: str = " TP0") -> str:
    t = dt.datetime.fromtimestamp(ts_us / 1e6, dt.UTC)
    return f"[{t:%Y-%m-%d %H:%M:%S}{rank}] {text}"


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def generate(
    sessions: int = 8,
    rounds: int = 4,
    *,
    seed: int = 7,
    decode_offset_us: int = 2_500,
    steps_per_request: int = 12,
    filler_per_step: int = 0,
    corruption: str = "evidence",
    base_rate: float = 0.0,
    bad_share: float | None = None,
) -> Incident:
    """An incident of sessions × rounds requests; filler lines scale it for benchmarks.

    `corruption` decides which requests the harness marks corrupted: "evidence" — exactly
    those with a bad room or in a burst step; "effect" — those with probability 0.9, the
    others with `base_rate` (bad rooms cause most corruption); "independent" — every
    request with `base_rate`, whatever its evidence. `bad_share` is the share of requests
    with a planted bad room (default: one in six, at least one of each kind).
    """
    if corruption not in ("evidence", "effect", "independent"):
        raise ValueError(f"unknown corruption model {corruption!r}")
    rng = random.Random(seed)
    pre: list[Entry] = []
    dec: list[Entry] = []
    results: list[dict] = []
    verdicts: dict[int, str] = {}
    t = T0_US
    step = 0
    n = sessions * rounds
    bad_kinds = ["partial", "stale", "mismatch", "missing_dst", "conflict", "missing_src"]
    n_bad = max(len(bad_kinds), n // 6) if bad_share is None else round(bad_share * n)
    bad_idx = {
        i: bad_kinds[k % len(bad_kinds)]
        for k, i in enumerate(rng.sample(range(1, n), min(n - 1, n_bad)))
    }
    burst_at = n // 2
    burst_steps: list[int] = []
    corrupted: set[str] = set()
    src_digests: list[tuple[int, str, str, str]] = []
    stale_of: dict[int, int] = {}  # room -> the room whose bytes decode got instead
    dst_count: dict[int, int] = {}  # room -> dst records logged
    suppressed: list[tuple[str, int]] = []  # journald's rate-limit notices: (host, messages)

    def P(ts: int, msg: str | bytes, **kw) -> None:
        pre.append(Entry(ts, ts - T0_US + 5_000_000, PREFILL_BOOT, "prefill-0",
                         "sglang-prefill.service", "python3", 2001, msg, **kw))  # fmt: skip

    def D(ts: int, msg: str | bytes, **kw) -> None:
        local = ts + decode_offset_us  # decode's clock runs ahead of prefill's
        dec.append(Entry(local, local - T0_US + 9_000_000, DECODE_BOOT, "decode-0",
                         "sglang-decode.service", "python3", 3001, msg, **kw))  # fmt: skip

    for i in range(n):
        sess, rnd = divmod(i, rounds)
        rid = f"{rng.getrandbits(128):032x}"
        room = rng.getrandbits(63)
        t += rng.randint(20_000, 60_000)
        start = t
        P(t, _sglang(t, f"Receive: obj=GenerateReqInput(rid='{rid}', text=None, "
                        f"bootstrap_host='10.0.4.11', bootstrap_port=8998, "
                        f"bootstrap_room={room}, stream=False)", ""))  # fmt: skip
        # Decode takes the request too and pre-allocates before prefill may send to it.
        D(t + 1_000, _sglang(t + 1_000, f"Receive: obj=GenerateReqInput(rid='{rid}', text=None, "
                                        f"bootstrap_host='10.0.4.11', bootstrap_port=8998, "
                                        f"bootstrap_room={room}, stream=False)", ""))  # fmt: skip
        t += 3_000
        P(t, _sglang(t, f"Prefill batch, #new-seq: 1, #new-token: {rng.randint(500, 9000)}, "
                        f"#cached-token: {rng.randint(0, 4000)}, token usage: 0.{rng.randint(10, 60)}, "
                        f"#running-req: 0, #queue-req: {rng.randint(0, 4)}, #prealloc-req: 0, "
                        f"#inflight-req: 1, input throughput (token/s): {rng.uniform(400, 9000):.2f}"))  # fmt: skip
        head, tail, full = _digest(room, "h"), _digest(room, "t"), _digest(room, "f")
        nbytes = 4096 * rng.randint(4, 64)
        t += 2_000
        kind = bad_idx.get(i, "match")
        if kind == "missing_src":
            pass  # prefill never logged it (a lost line, a crashed rank)
        elif i % 5 == 1:  # the contract's JSON form, as some forks write it
            P(t, "forensics:checksum " + orjson.dumps({
                "side": "src", "room": room, "rid": rid, "buf": "index_k", "layer": "all",
                "tp": 0, "dtype": "fp8", "nbytes": nbytes, "head": head, "tail": tail, "full": full,
            }).decode())  # fmt: skip
        else:
            P(t, f"forensics:checksum side=src room={room} rid={rid} buf=index_k layer=all tp=0 "
                 f"dtype=fp8 nbytes={nbytes} head={head} tail={tail} full={full}")  # fmt: skip
        d_head, d_tail, d_full = head, tail, full
        if kind == "partial":
            d_tail, d_full = _digest(room, "t", "torn"), _digest(room, "f", "torn")
        elif kind == "stale" and src_digests:
            stale_of[room], d_head, d_tail, d_full = src_digests[-1]
        elif kind == "stale":
            kind = "match"
        elif kind == "mismatch":
            d_head, d_tail, d_full = _digest(room, 1), _digest(room, 2), _digest(room, 3)
        verdicts[room] = kind
        if kind != "missing_src":  # only what prefill logged can be received stale
            src_digests.append((room, head, tail, full))
        t += rng.randint(5_000, 30_000)  # transfer
        if kind != "missing_dst":
            copies = 2 if kind == "match" and i % 7 == 3 else 1  # identical duplicates count
            for _ in range(copies):
                D(t, f"forensics:checksum side=dst room={room} rid={rid} buf=index_k layer=all "
                     f"tp=0 dtype=fp8 nbytes={nbytes} head={d_head} tail={d_tail} full={d_full}")  # fmt: skip
            dst_count[room] = copies
            if kind == "conflict":  # a second dst record that disagrees with the first
                D(t + 1, f"forensics:checksum side=dst room={room} rid={rid} buf=index_k "
                         f"layer=all tp=0 dtype=fp8 nbytes={nbytes} head={_digest(room, 9)} "
                         f"tail={d_tail} full={d_full}")  # fmt: skip
                D(t + 2, _sglang(t + 2, f"Context corruption detected: Request {rid} "
                                        f"(bootstrap_room={room}) received metadata from "
                                        f"bootstrap_room={src_digests[-2][0]}. Metadata buffer "
                                        f"index: 17. This indicates metadata buffer index collision."), priority=3)  # fmt: skip
                dst_count[room] = 2
        else:
            D(t, _sglang(t, f"Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' "
                            f"decode_req.req.bootstrap_room={room} with exception "
                            f"KVTransferError(bootstrap_room={room}): Request {room} timed out "
                            f"after 300.0s in KVPoll.WaitingForInput"), priority=3)  # fmt: skip
        if i == n // 3:  # journald's rate limit dropped some of decode's lines here
            local = t + decode_offset_us
            dec.append(Entry(local, local - T0_US + 9_000_000, DECODE_BOOT, "decode-0",
                             "systemd-journald.service", "systemd-journald", 412,
                             "Suppressed 1834 messages from sglang-decode.service", priority=5))  # fmt: skip
            suppressed.append(("decode-0", 1834))
        bad_step = False
        for _ in range(steps_per_request):
            step += 1
            t += rng.randint(8_000, 14_000)
            D(t, f"forensics:step step={step} bs=1 rids={rid} rooms={room}")
            expected = [step % 997, (step + 1) % 997]
            changed = list(expected)
            if burst_at <= i < burst_at + 2 and len(burst_steps) < 3:
                changed += list(range(300 + step % 7, 330 + step % 7))
                burst_steps.append(step)
                bad_step = True
            for layer in (0, 30):
                lay_changed = changed if layer == 30 else expected
                D(t, f"forensics:canary step={step} layer={layer} bs=1 mode=replay "
                     f"expected={','.join(map(str, expected))} "
                     f"changed={','.join(map(str, lay_changed))}")  # fmt: skip
            if step % 10 == 0:
                D(t, _sglang(t, f"Decode batch, #running-req: {rng.randint(30, 70)}, "
                                f"#token: {rng.randint(10000, 200000)}, token usage: 0.{rng.randint(10, 90)}, "
                                f"pre-allocated usage: 0.02, #prealloc-req: 1, #transfer-req: 0, "
                                f"#retracted-req: 0, cuda graph: True, gen throughput (token/s): "
                                f"{rng.uniform(500, 2500):.2f}, #queue-req: 0"))  # fmt: skip
            for k in range(filler_per_step):
                D(
                    t + k,
                    _sglang(
                        t + k,
                        f'INFO:     10.0.4.2:{40000 + k} - "POST /generate HTTP/1.1" 200 OK',
                        "",
                    ),
                )
        t += 2_000
        D(t, _sglang(t, f"Finish: obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.0.4.11', "
                        f"bootstrap_port=8998, bootstrap_room={room}), out={{'meta_info': "
                        f"{{'id': '{rid}', 'finish_reason': {{'type': 'stop'}}}}}}", ""))  # fmt: skip
        D(
            t,
            _sglang(
                t, 'INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK', ""
            ),
        )
        bad = kind != "match" or bad_step
        if corruption == "effect":
            bad = rng.random() < (0.9 if bad else base_rate)
        elif corruption == "independent":
            bad = rng.random() < base_rate
        if bad:
            corrupted.add(rid)
        results.append({
            "session": sess, "round": rnd, "rid": rid, "room": room,
            "corrupted": bad, "reason": "tool-call markup in content" if bad else "",
            "start": start / 1e6, "end": t / 1e6, "concurrency": sessions,
        })  # fmt: skip
    # A traceback (multi-line message) and a non-UTF-8 byte string, as real logs have them.
    t += 10_000
    D(t, "Traceback (most recent call last):\n  File \"scheduler.py\", line 1, in <module>\n"
         "RuntimeError: CUDA graph replay wrote outside its pages", priority=3)  # fmt: skip
    D(t + 1, b"tokenizer emitted invalid bytes: \xff\xfe")
    truth = {
        "verdicts": verdicts,
        "stale_of": stale_of,
        "dst_count": dst_count,
        "burst_steps": burst_steps,
        "corrupted": sorted(corrupted),
        "decode_offset_us": decode_offset_us,
        "suppressed": suppressed,
    }
    return Incident(pre, dec, results, truth)


def export_stream(entries: list[Entry]) -> Iterator[bytes]:
    for i, e in enumerate(entries):
        yield export_entry(
            [
                ("__CURSOR", f"s=synthetic;i={i:x};b={e.boot_id};m={e.mono_us:x};t={e.ts_us:x}"),
                ("__REALTIME_TIMESTAMP", e.ts_us),
                ("__MONOTONIC_TIMESTAMP", e.mono_us),
                ("_BOOT_ID", e.boot_id),
                ("_HOSTNAME", e.host),
                ("_SYSTEMD_UNIT", e.unit),
                ("SYSLOG_IDENTIFIER", e.ident),
                ("_PID", e.pid),
                ("_TRANSPORT", "stdout"),
                ("PRIORITY", e.priority),
                ("MESSAGE", e.message),
                *e.extra.items(),
            ]
        )


def write_export(entries: list[Entry], path: Path) -> Path:
    with open(path, "wb") as fh:
        for chunk in export_stream(entries):
            fh.write(chunk)
    return path


def write_results(results: list[dict], path: Path) -> Path:
    with open(path, "wb") as fh:
        for r in results:
            fh.write(orjson.dumps(r) + b"\n")
    return path


def render_short_iso_precise(entries: list[Entry]) -> Iterator[bytes]:
    """Lines as `journalctl -o short-iso-precise --all` prints them (for machines without it)."""
    for e in entries:
        t = dt.datetime.fromtimestamp(e.ts_us // 1_000_000, dt.UTC)
        head = f"{t:%Y-%m-%dT%H:%M:%S}.{e.ts_us % 1_000_000:06d}+0000 {e.host} {e.ident}[{e.pid}]: "
        msg = e.message if isinstance(e.message, bytes) else e.message.encode()
        lines = msg.rstrip(b"\n").split(b"\n")
        indent = b" " * len(head)
        yield head.encode() + lines[0] + b"\n" + b"".join(indent + ln + b"\n" for ln in lines[1:])


def write_short_iso_precise(entries: list[Entry], path: Path) -> Path:
    with open(path, "wb") as fh:
        for chunk in render_short_iso_precise(entries):
            fh.write(chunk)
    return path
