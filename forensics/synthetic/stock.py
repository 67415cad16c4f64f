"""A PD incident as stock SGLang prints it, with no probe records: the flags of the
README's "before the next incident" list on (--enable-request-time-stats-logging,
--log-requests, --enable-metrics, SGLANG_LOG_SCHEDULER_STATUS_TARGET=stdout,
--export-metrics-to-file on decode), and a known truth.

Corrupted requests each have one planted cause on their decode host and in their own
window: a retraction (and num_retractions = 1 in their meta_info), another request's
abort, or their own transfer timing out (an abort with status 500). The rest of the
log is ordinary: batch lines, time stats, Finish lines, a CUDA-graph capture line and,
at the end, a CUDA error.
"""

from __future__ import annotations

import datetime as dt
import json
import random

from .incident import DECODE_BOOT, PREFILL_BOOT, T0_US, Entry, Incident, _sglang

CAUSES = ("retract", "other_abort", "own_timeout")


def _time_stats(
    rid: str, room: int, side: str, n_in: int, cached: int, n_out: int, durations: str
) -> str:
    """A ReqTimeStats line as schedule_batch.py's log_time_stats prints it."""
    return (f"ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={n_in}, "
            f"cached_input_len={cached}, output_len={n_out}, attempts=0, type={side}): {durations}")  # fmt: skip


CAPTURED = [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]


def _hour(ts_us: int) -> str:
    return dt.datetime.fromtimestamp(ts_us / 1e6, dt.UTC).strftime("%Y%m%d_%H")


def _iso(ts_us: int) -> str:
    return dt.datetime.fromtimestamp(ts_us / 1e6, dt.UTC).replace(tzinfo=None).isoformat()


def generate_stock(
    sessions: int = 8, rounds: int = 6, *, seed: int = 11, bad_share: float = 0.3
) -> Incident:
    """sessions × rounds requests; about `bad_share` of them corrupted, one cause each."""
    rng = random.Random(seed)
    pre: list[Entry] = []
    dec: list[Entry] = []
    results: list[dict] = []
    n = sessions * rounds
    bad = {i: CAUSES[k % len(CAUSES)]
           for k, i in enumerate(sorted(rng.sample(range(2, n), round(bad_share * n))))}  # fmt: skip

    def P(ts: int, msg: str, **kw) -> None:
        pre.append(Entry(ts, ts - T0_US + 5_000_000, PREFILL_BOOT, "prefill-0",
                         "sglang-prefill.service", "python3", 2001, msg, **kw))  # fmt: skip

    def D(ts: int, msg: str, **kw) -> None:
        dec.append(Entry(ts, ts - T0_US + 9_000_000, DECODE_BOOT, "decode-0",
                         "sglang-decode.service", "python3", 3001, msg, **kw))  # fmt: skip

    t = T0_US
    D(t, _sglang(t, f"Capture cuda graph bs [{', '.join(map(str, CAPTURED))}]"))
    rids: list[str] = []
    metrics: dict[str, list[str]] = {}
    for i in range(n):
        sess, rnd = divmod(i, rounds)
        rid = f"{rng.getrandbits(128):032x}"
        room = rng.getrandbits(63)
        rids.append(rid)
        t += rng.randint(1_200_000, 2_500_000)  # seconds apart: whole-second prefixes
        start = t
        cause = bad.get(i)
        recv = (f"Receive: obj=GenerateReqInput(rid='{rid}', text='…' ... , "
                f"bootstrap_host='10.0.4.11', bootstrap_port=8998, bootstrap_room={room}, "
                f"stream=False)")  # fmt: skip
        P(t, _sglang(t, recv, ""))
        D(t + 1_000, _sglang(t + 1_000, recv, ""))
        prompt = rng.randint(2_000, 9_000)
        cached = rng.randint(0, prompt // 2)
        t += 200_000
        P(t, _sglang(t, f"Prefill batch, #new-seq: 1, #new-token: {prompt - cached}, "
                        f"#cached-token: {cached}, token usage: 0.{rng.randint(10, 60)}, "
                        f"#running-req: 0, #queue-req: {rng.randint(0, 4)}, #prealloc-req: 0, "
                        f"#inflight-req: 1, input throughput (token/s): {rng.uniform(400, 9000):.2f}"))  # fmt: skip
        P(t + 1_000, _sglang(t + 1_000, _time_stats(
            rid, room, "prefill", prompt, cached, 1,
            f"bootstrap_duration=0.40ms, queue_duration={rng.uniform(0.2, 30):.2f}ms, "
            f"forward_duration={rng.uniform(80, 900):.2f}ms, entry_time={start / 1e6:.3f}, "
            f"transfer_speed=12.10 GB/s, transfer_total={prompt * 0.07:.2f} MB")))  # fmt: skip
        running = rng.choice([8, 16, 23, 31, 40, 47, 56, 61])
        t += 300_000
        D(t, _sglang(t, f"Decode batch, #running-req: {running}, #token: {running * 4000}, "
                        f"token usage: 0.{rng.randint(20, 95)}, pre-allocated usage: 0.02, "
                        f"#prealloc-req: 1, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
                        f"gen throughput (token/s): {rng.uniform(500, 2500):.2f}, #queue-req: 0"))  # fmt: skip
        # a scheduler.status snapshot (SGLANG_LOG_SCHEDULER_STATUS_TARGET=stdout): the
        # request running beside the one before it
        peers = ", ".join(f'"{r}"' for r in rids[max(0, i - 1) : i + 1])
        D(t + 50_000, _sglang(t + 50_000, '{"timestamp": "' + _iso(t + 50_000) + '", '
                                          '"event": "scheduler.status", "running_rids": '
                                          f'[{peers}], "queued_rids": []}}', ""))  # fmt: skip
        retractions = 0
        finish: dict = {"type": "stop", "matched": 151645}
        status = "ok"
        if cause == "retract":
            D(t + 100_000, _sglang(t + 100_000, "KV cache pool is full. Retract requests. "
                                                "#retracted_reqs: 2, #new_token_ratio: 0.4100 -> 0.7000",
                                   " DP0 TP0 EP0"), priority=4)  # fmt: skip
            retractions = 1
        elif cause == "other_abort":
            other = rids[i - 1]
            D(t + 100_000, _sglang(t + 100_000, f"Abort running request. req.rid='{other}'"))
        elif cause == "own_timeout":
            D(t + 100_000, _sglang(t + 100_000, f"Decode transfer failed for request rank=0 "
                                                f"decode_req.req.rid='{rid}' decode_req.req.bootstrap_room={room} "
                                                f"with exception KVTransferError(bootstrap_room={room}): "
                                                f"Request {room} timed out after 300.0s in KVPoll.WaitingForInput"),
              priority=3)  # fmt: skip
            finish = {"type": "abort", "message": f"KVTransferError(bootstrap_room={room})",
                      "status_code": 500, "err_type": None}  # fmt: skip
        out_len = rng.randint(40, 400)
        t += rng.randint(600_000, 1_500_000)
        D(t, _sglang(t, _time_stats(
            rid, room, "decode", prompt, 0, out_len,
            f"bootstrap_duration=0.90ms, alloc_wait_duration=1.10ms, "
            f"transfer_duration={rng.uniform(5, 40):.2f}ms, queue_duration=0.50ms, "
            f"forward_duration={rng.uniform(500, 1400):.2f}ms, entry_time={start / 1e6:.3f}")))  # fmt: skip
        D(t + 1_000, _sglang(t + 1_000, f"Finish: obj=GenerateReqInput(rid='{rid}', text='…' ... , "
                                        f"bootstrap_room={room}), out={{'text': '…' ... , 'meta_info': "
                                        f"{{'id': '{rid}', 'finish_reason': {finish!r}, 'prompt_tokens': {prompt}, "
                                        f"'completion_tokens': {out_len}, 'cached_tokens': {cached}, "
                                        f"'num_retractions': {retractions}, 'e2e_latency': {(t - start) / 1e6:.3f}, "
                                        f"'dp_rank': 0}}}}", ""))  # fmt: skip
        sent = t + 1_000
        metrics.setdefault(f"sglang-request-metrics-{_hour(sent)}.log", []).append(json.dumps({
            "request_parameters": json.dumps({"rid": rid, "bootstrap_host": "10.0.4.11",
                                              "bootstrap_room": room, "stream": False}),
            "id": rid, "finish_reason": finish, "prompt_tokens": prompt,
            "completion_tokens": out_len, "cached_tokens": cached,
            "num_retractions": retractions, "e2e_latency": round((t - start) / 1e6, 3),
            "response_sent_to_client_ts": sent / 1e6,
        }))  # fmt: skip
        D(
            t + 2_000,
            _sglang(t + 2_000, 'INFO:     127.0.0.1:40052 - "POST /generate HTTP/1.1" 200 OK', ""),
        )
        # A timed-out transfer reaches the client as an HTTP 500, not as corrupted text.
        corrupted = cause in ("retract", "other_abort")
        if cause == "own_timeout":
            status = "http_error"
        elif corrupted:
            status = "corrupted"
        results.append({
            "session": sess, "round": rnd, "rid": rid, "corrupted": corrupted,
            "reason": "tool-call markup in content" if corrupted else "",
            "status": status, "start": start / 1e6, "end": (t + 50_000) / 1e6,
            "concurrency": sessions,
        })  # fmt: skip
    t += 5_000_000
    D(t, "Traceback (most recent call last):\n  File \"scheduler.py\", line 1, in event_loop\n"
         "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
      priority=3)  # fmt: skip
    truth = {
        "causes": {rids[i]: c for i, c in bad.items()},
        "corrupted": sorted(rids[i] for i, c in bad.items() if c != "own_timeout"),
        "http_error": sorted(rids[i] for i, c in bad.items() if c == "own_timeout"),
        "captured": CAPTURED,
    }
    return Incident(pre, dec, results, truth, metrics)
