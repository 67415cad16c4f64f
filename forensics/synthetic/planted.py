"""Stock PD incidents with one planted cause of corruption and load as a confounder:
the known truth `forensics suspects` is tested against.

Requests go to one of two decode hosts through load phases (low, mid, high). High load
raises the requests in flight, the decode batch and the chance of another request's
abort and of a retraction on the request's decode host — so every one of them goes with
corruption when one causes it. The planted cause alone decides the outcome:

- "abort": another request aborted on the same decode host right after this one's
  transfer (sglang #24527's shape)
- "retract": decode retracted requests while this one ran (it was among them)
- "host": decoded on decode-1
- "line": a line no pattern names, logged on the request's decode host (or its prefill
  host: `side`) `lag_s` before its transfer; a decoy line that is not the cause is logged
  as often, in the same load phases, after requests finish
- "nic": a Mooncake slice failure (retried) on prefill naming the transfer's NIC pair,
  just before it; only the failures of one pair (prefill's mlx5_3 to decode-1's mlx5_3)
  corrupt, the other pairs' are harmless
- "lease": prefill let the request's KV blocks go on a lease's expiry and decode read
  them all the same (vLLM's two NIXL lines on prefill, naming its rid), more often under
  load
- None: no cause; corruption at one rate everywhere (the null)

Beside a cause (or none), `config=` makes prefill and decode-1 disagree on one argument
that must agree (`page_size` or `kv_cache_dtype`, as each side's `server_args=` line
prints it) and corrupts the requests decoded there; `peer_loss=` loses decode-1's remote
agent (see _lost); `onset=` steps every rate up.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from .incident import DECODE_BOOT, PREFILL_BOOT, T0_US, Entry, Incident, _sglang
from .stock import CAPTURED, _time_stats

CAUSES = ("abort", "retract", "host", "line", "nic", "lease")
# vLLM's NIXL worker (nixl/base_worker.py) as aws-samples/aws-do-eks#84 shows it: prefill
# lets the blocks go, then a decode worker reads them all the same
LEASE_LINES = (
    "Releasing expired KV blocks for request {rid} which were retrieved by 0 remote worker(s) "
    "before lease expired.",
    "Potentially invalid KV blocks for unrecognized request {rid} were retrieved by a decode "
    "worker. They may have expired.",
)
BAD_NIC = 3  # with decode-1: the pair whose failures corrupt
SLICE_LINE = (  # Mooncake's worker_pool.cpp LOG(ERROR), as sgl-project/sglang#10560 shows it
    "E{md} {clock} 4058290 worker_pool.cpp:294] Worker: Process failed for slice (opcode: 1, "
    "source_addr: 0x{src:x}, length: 65536, dest_addr: 0x{dst:x}, local_nic: mlx5_{nic}, "
    "peer_nic: 10.0.5.{ip}:16581@mlx5_{nic}, dest_rkey: 2101, retry_cnt: 0): transport retry "
    "counter exceeded"
)
# the planted line and the decoy: no pattern names either
CAUSE_LINE = "mlx5_{nic}: RDMA completion error on QP 0x{qp:x} (wr_id {wr}, vendor_err 0x{err:x})"
DECOY_LINE = "Tokenizer manager paused {ms} ms for garbage collection"
DETECT_LINE = "Output validator: tool-call markup found in content"
LOADS = {  # concurrency at send, P(another abort), P(retraction) in a request's window
    "low": ((6, 20), 0.04, 0.03),
    "mid": ((20, 40), 0.08, 0.06),
    "high": ((40, 64), 0.30, 0.25),
}
BASE_RATE = 0.03  # corruption without the cause
CAUSED_RATE = 0.55  # with it (decode-1: HOST_RATE)
HOST_RATE = 0.2
NULL_RATE = 0.06
LOST_HOST = "decode-1"  # the host whose remote agent is lost (peer_loss)
RETRIED = 0.15  # of its failed transfers, those the router retries elsewhere
FAIL_OPEN_RATE = 0.7  # of the rest, answered 200 with garbage
PHASE = 40  # requests a load phase
ONSET_STEP = 3.0  # the rate's change at a planted onset
CONFIG_HOST = "decode-1"  # the decode host whose arguments differ from prefill's (config=)
# each side's arguments (SGLang's `server_args=ServerArgs(...)`, the names of 0.5) and the
# value decode-1 prints instead for `config=`
SERVER_ARGS = {"model_path": "'/models/DeepSeek-V3'", "tp_size": "8", "page_size": "64",
               "kv_cache_dtype": "'auto'", "attention_backend": "'flashinfer'",
               "disaggregation_transfer_backend": "'mooncake'"}  # fmt: skip
CONFIG_VALUES = {"page_size": "32", "kv_cache_dtype": "'fp8_e4m3'"}


@dataclass
class _Plan:
    """What one generated incident is: its cause and knobs, the random draws, and the
    lines, results and truth written so far."""

    cause: str | None
    rng: random.Random
    hosts: list[str]
    lag_s: float
    side: str
    detect: bool
    began: int | None  # the request from which the onset's rates apply
    lost: int | None  # the request from which LOST_HOST's agent is gone
    config: str | None  # the argument CONFIG_HOST disagrees with prefill on
    lrng: random.Random  # the peer loss's own draws: the others stay as they were
    pre: list[Entry] = field(default_factory=list)
    dec: list[Entry] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)
    truth: dict = field(default_factory=lambda: {"caused": [], "corrupted": []})
    recent: dict[str, list[str]] = field(default_factory=dict)

    def P(self, ts: int, msg: str, **kw) -> None:
        self.pre.append(Entry(ts, ts - T0_US + 5_000_000, PREFILL_BOOT, "prefill-0",
                              "sglang-prefill.service", "python3", 2001, msg, **kw))  # fmt: skip

    def D(self, host: str, ts: int, msg: str, **kw) -> None:
        boot = DECODE_BOOT[: -len(host)] + host  # one boot per host
        self.dec.append(Entry(ts, ts - T0_US + 9_000_000, boot, host, "sglang-decode.service",
                              "python3", 3001, msg, **kw))  # fmt: skip


@dataclass
class _Request:
    i: int
    t: int  # decode's Receive less 2 ms: its send
    host: str
    rid: str
    room: int
    concurrency: int
    dp_rank: int
    phase: str
    prompt: int = 0
    cached: int = 0
    retracted: bool = False


def generate_planted(
    cause: str | None,
    *,
    seed: int = 0,
    requests: int = 600,
    sessions: int = 40,
    decode_hosts: int = 2,
    dp_ranks: int = 1,
    lag_s: float = 0.1,
    side: str = "decode",
    detect: bool = False,
    onset: float | None = None,
    peer_loss: float | None = None,
    config: str | None = None,
) -> Incident:
    """`requests` requests in `sessions` sessions with `cause` planted (see the module),
    over `decode_hosts` decode hosts of `dp_ranks` DP ranks each (`lag_s`, `side`: where
    the "line" cause is logged; `detect`: a line saying so after each corrupted request's
    transfer, a consequence; `onset`: from the middle of the load phase this share of the
    requests in, every rate ×ONSET_STEP, its time the truth's `onset_us`; `peer_loss`:
    from this share of the requests in, decode-1's remote agent is gone — see _lost;
    `config`: an argument of CONFIG_VALUES on which decode-1 disagrees with prefill)."""
    if cause is not None and cause not in CAUSES:
        raise ValueError(f"unknown cause {cause!r}; choose from {', '.join(CAUSES)} or None")
    if config is not None and config not in CONFIG_VALUES:
        raise ValueError(f"unknown config {config!r}; choose from {', '.join(CONFIG_VALUES)}")
    hosts = [f"decode-{i}" for i in range(max(2, decode_hosts))]
    plan = _Plan(
        cause, random.Random(f"planted:{cause}:{seed}"), hosts, lag_s, side, detect,
        None if onset is None else int(onset * requests) // PHASE * PHASE + PHASE // 2,
        None if peer_loss is None else int(peer_loss * requests), config,
        random.Random(f"peer_loss:{seed}"), recent={h: [] for h in hosts},
    )  # fmt: skip
    t = T0_US
    _started(plan, t)
    for host in hosts:
        plan.D(host, t, _sglang(t, f"Capture cuda graph bs [{', '.join(map(str, CAPTURED))}]"))
    phase = "low"
    rounds = max(1, requests // sessions)
    for i in range(requests):
        if i % PHASE == 0:
            phase = plan.rng.choice(tuple(LOADS))
        req = _received(plan, i, t, phase, dp_ranks)
        caused = _planted_cause(plan, req)
        corrupted = _judged(plan, req, caused)
        t = _finished(plan, req, corrupted, caused, i % sessions, i // sessions % rounds)
    plan.dec.sort(key=lambda e: e.ts_us)
    return Incident(plan.pre, plan.dec, plan.results, {"cause": cause, **plan.truth})


def _started(plan: _Plan, t: int) -> None:
    """Each server's `server_args=ServerArgs(...)` line (CONFIG_HOST's differs for config=)."""

    def line(side: str, host: str) -> str:
        args = dict(SERVER_ARGS)
        if host == CONFIG_HOST and plan.config is not None:
            args[plan.config] = CONFIG_VALUES[plan.config]
            plan.truth["config"] = {"host": host, "name": plan.config, "value": args[plan.config]}
        said = ", ".join(
            f"{k}={v}" for k, v in {"disaggregation_mode": f"'{side}'", **args}.items()
        )
        return _sglang(t - 60_000_000, f"server_args=ServerArgs({said})", "")

    plan.P(t - 60_000_000, line("prefill", "prefill-0"))
    for host in plan.hosts:
        plan.D(host, t - 60_000_000, line("decode", host))


def _received(plan: _Plan, i: int, t: int, phase: str, dp_ranks: int) -> _Request:
    """Request `i` sent, received on both sides, prefilled, and its decode host's load."""
    rng = plan.rng
    (c_lo, c_hi), _, _ = LOADS[phase]
    concurrency = rng.randint(c_lo, c_hi)
    host = rng.choice(plan.hosts)
    dp_rank = rng.randrange(dp_ranks)
    rid = f"{rng.getrandbits(128):032x}"
    room = rng.getrandbits(63)
    t += rng.randint(1_000_000, 1_600_000)
    req = _Request(i, t, host, rid, room, concurrency, dp_rank, phase)
    recv = (f"Receive: obj=GenerateReqInput(rid='{rid}', text='…' ... , "
            f"bootstrap_host='10.0.4.11', bootstrap_port=8998, bootstrap_room={room}, "
            f"stream=False)")  # fmt: skip
    plan.P(t, _sglang(t, recv, ""))
    plan.D(host, t + 2_000, _sglang(t + 2_000, recv, ""))
    req.prompt = rng.randint(1_500, 9_000)
    req.cached = rng.randint(0, req.prompt // 2)
    plan.P(t + 100_000, _sglang(t + 100_000, _time_stats(
        rid, room, "prefill", req.prompt, req.cached, 1,
        f"bootstrap_duration=0.40ms, queue_duration={rng.uniform(0.2, 30):.2f}ms, "
        f"forward_duration={rng.uniform(80, 900):.2f}ms, entry_time={t / 1e6:.3f}, "
        f"transfer_speed={rng.uniform(8, 14):.2f} GB/s, transfer_total={req.prompt * 0.07:.2f} MB")))  # fmt: skip
    running = max(1, concurrency // 2 + rng.randint(-3, 3))
    t_batch = t + 200_000
    plan.D(host, t_batch, _sglang(t_batch, f"Decode batch, #running-req: {running}, #token: "
                                           f"{running * 4000}, token usage: 0.{rng.randint(20, 95)}, "
                                           "pre-allocated usage: 0.02, #prealloc-req: 1, #transfer-req: 0, "
                                           "#retracted-req: 0, cuda graph: True, gen throughput "
                                           f"(token/s): {rng.uniform(500, 2500):.2f}, #queue-req: 0"))  # fmt: skip
    return req


def _planted_cause(plan: _Plan, req: _Request) -> bool:
    """What happens near the request's transfer (aborts, retractions, the line, the slice
    failure), and whether the planted cause touched it."""
    rng, host, t = plan.rng, req.host, req.t
    _, p_abort, p_retract = LOADS[req.phase]
    aborted = rng.random() < p_abort and plan.recent[host]
    retracted = rng.random() < p_retract
    lined = plan.cause == "line" and rng.random() < p_abort
    if lined:  # lag_s before decode's Receive (t + 2 ms), on the side's host
        at = t + 2_000 - int(plan.lag_s * 1e6)
        text = _sglang(at, CAUSE_LINE.format(nic=rng.randrange(8), qp=rng.getrandbits(20),
                                              wr=rng.getrandbits(32), err=rng.getrandbits(8)))  # fmt: skip
        plan.P(at, text) if plan.side == "prefill" else plan.D(host, at, text)
    nic = rng.randrange(8) if plan.cause == "nic" else 0  # other causes draw as they did
    slice_failed = plan.cause == "nic" and rng.random() < p_abort
    if slice_failed:  # prefill writes the KV after its forward: its engine logs it
        plan.P(t + 120_000, _slice_line(t + 120_000, rng, nic, 10 + plan.hosts.index(host)))
    leased = plan.cause == "lease" and rng.random() < p_abort
    for k, line in enumerate(LEASE_LINES if leased else ()):
        plan.P(
            t + 130_000 + k * 20_000, _sglang(t + 130_000 + k * 20_000, line.format(rid=req.rid))
        )
    if aborted:  # another request on this host, right after this one's transfer
        other = plan.recent[host][-1]
        plan.D(host, t + 250_000, _sglang(t + 250_000, f"Abort running request. req.rid='{other}'"))
    if retracted:
        plan.D(host, t + 300_000, _sglang(t + 300_000, "KV cache pool is full. Retract requests. "
                                                       "#retracted_reqs: 2, #new_token_ratio: 0.4100 -> 0.7000",
                                          " DP0 TP0 EP0"), priority=4)  # fmt: skip
    req.retracted = retracted
    return {
        "abort": bool(aborted), "retract": retracted, "host": host == "decode-1",
        "line": lined, "nic": slice_failed and nic == BAD_NIC and host == "decode-1",
        "lease": leased, None: False,
    }[plan.cause]  # fmt: skip


def _judged(plan: _Plan, req: _Request, caused: bool) -> bool:
    """Whether the reply is corrupted: the planted rates, the onset, the lost agent."""
    cause, t = plan.cause, req.t
    rate = (HOST_RATE if cause == "host" else CAUSED_RATE) if caused else (
        NULL_RATE if cause is None else BASE_RATE)  # fmt: skip
    if plan.began is not None and req.i >= plan.began:
        rate = min(1.0, rate * ONSET_STEP)
        plan.truth.setdefault("onset_us", t)
    corrupted = plan.rng.random() < rate
    if plan.config is not None and req.host == CONFIG_HOST:  # decode-1 reads the KV wrong
        corrupted = plan.lrng.random() < CAUSED_RATE
    if plan.lost is not None and req.i >= plan.lost and req.host == LOST_HOST:
        corrupted = _lost(plan.P, plan.D, t, req.rid, req.room, plan.lrng, plan.truth)
    if plan.detect and corrupted:  # what a checker inside the server would print
        plan.D(req.host, t + 500_000, _sglang(t + 500_000, DETECT_LINE))
    return corrupted


def _finished(plan: _Plan, req: _Request, corrupted: bool, caused: bool, sess: int,
              rnd: int) -> int:  # fmt: skip
    """Decode's time stats and Finish, the decoy, the harness's result; the end's time."""
    rng, host, t, rid, room = plan.rng, req.host, req.t, req.rid, req.room
    out_len = rng.randint(40, 400)
    t_end = t + rng.randint(600_000, 900_000)
    plan.D(host, t_end, _sglang(t_end, _time_stats(
        rid, room, "decode", req.prompt, 0, out_len,
        f"bootstrap_duration=0.90ms, alloc_wait_duration=1.10ms, "
        f"transfer_duration={rng.uniform(5, 40):.2f}ms, queue_duration={rng.uniform(0.1, 9):.2f}ms, "
        f"forward_duration={rng.uniform(300, 600):.2f}ms, entry_time={t / 1e6:.3f}")))  # fmt: skip
    finish = {"type": "stop", "matched": 151645}
    plan.D(host, t_end + 1_000, _sglang(t_end + 1_000, f"Finish: obj=GenerateReqInput(rid='{rid}', text='…' ... , "
                                                       f"bootstrap_room={room}), out={{'text': '…' ... , 'meta_info': "
                                                       f"{{'id': '{rid}', 'finish_reason': {finish!r}, 'prompt_tokens': {req.prompt}, "
                                                       f"'completion_tokens': {out_len}, 'cached_tokens': {req.cached}, "
                                                       f"'num_retractions': {int(req.retracted)}, "
                                                       f"'e2e_latency': {(t_end - t) / 1e6:.3f}, 'dp_rank': {req.dp_rank}}}}}", ""))  # fmt: skip
    if plan.cause == "line" and rng.random() < LOADS[req.phase][1]:  # the decoy: same phases
        plan.D(
            host,
            t_end + 350_000,
            _sglang(t_end + 350_000, DECOY_LINE.format(ms=rng.randint(40, 900))),
        )
    plan.recent[host] = [*plan.recent[host][-3:], rid]
    status = "corrupted" if corrupted else "ok"
    if rng.random() < 0.01:  # a few replies never come: left out, counted
        status, corrupted = "http_error", False
    if caused:
        plan.truth["caused"].append(rid)
    if corrupted:
        plan.truth["corrupted"].append(rid)
    plan.results.append({
        "session": sess, "round": rnd, "rid": rid, "corrupted": corrupted,
        "reason": "tool-call markup in content" if corrupted else "", "status": status,
        "start": t / 1e6, "end": (t_end + 20_000) / 1e6, "concurrency": req.concurrency,
        "step": rng.randrange(4), "attempt": 1,
    })  # fmt: skip
    return t_end


def _lost(P, D, t: int, rid: str, room: int, rng: random.Random, truth: dict) -> bool:
    """A transfer on the host whose remote agent is gone (nixl#1983's shape): the first
    fails with the disconnect, every later one with the agent not found — half of them
    echoed by another rank of the host (SGLang's "unknown reason from another rank") and
    each by prefill's "Aborted by AbortReq." (sglang#26092's shape). Most are answered
    200 with garbage (fail-open: `fail_open` in the truth); RETRIED of them the router
    sends again under another room, to the other decode host, and it succeeds
    (`recovered`). Returns whether the reply is corrupted."""
    code = "NIXL_ERR_NOT_FOUND" if truth.get("fail_open") or truth.get("recovered") else (
        "NIXL_ERR_REMOTE_DISCONNECT")  # fmt: skip
    truth.setdefault("peer_loss_us", t + 150_000)
    D(LOST_HOST, t + 150_000, _sglang(t + 150_000, (
        f"Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' "
        f"decode_req.req.bootstrap_room={room} with exception {code}"), " DP0 TP0 EP0"))  # fmt: skip
    if rng.random() < 0.5:
        D(LOST_HOST, t + 152_000, _sglang(t + 152_000, (
            f"Decode transfer failed for request rank=1 decode_req.req.rid='{rid}' "
            f"decode_req.req.bootstrap_room={room} with exception KVTransferError("
            f"bootstrap_room={room}): Failed due to an unknown reason from another rank"),
            " DP0 TP1 EP1"))  # fmt: skip
    P(t + 180_000, _sglang(t + 180_000, (
        f"Prefill transfer failed for request rank=0 req.rid='{rid}' req.bootstrap_room="
        f"{room} with exception KVTransferError(bootstrap_room={room}): Aborted by AbortReq."),
        " DP0 TP0 EP0"))  # fmt: skip
    if rng.random() < RETRIED:
        again = rng.getrandbits(63)
        recv = (f"Receive: obj=GenerateReqInput(rid='{rid}', text='…' ... , "
                f"bootstrap_host='10.0.4.11', bootstrap_port=8998, bootstrap_room={again}, "
                f"stream=False)")  # fmt: skip
        D("decode-0", t + 400_000, _sglang(t + 400_000, recv, ""))
        truth.setdefault("recovered", []).append(rid)
        return False
    truth.setdefault("fail_open", []).append(rid)
    return rng.random() < FAIL_OPEN_RATE


def _slice_line(at: int, rng: random.Random, nic: int, ip: int) -> str:
    """Mooncake's slice failure at `at` (µs), glog-stamped, naming NIC pair `nic` to
    10.0.5.`ip`."""
    stamp = time.gmtime(at // 1_000_000)
    return SLICE_LINE.format(
        md=time.strftime("%m%d", stamp),
        clock=time.strftime("%H:%M:%S", stamp) + f".{at % 1_000_000:06d}",
        src=rng.getrandbits(44),
        dst=rng.getrandbits(44),
        nic=nic,
        ip=ip,
    )


def write_planted(inc: Incident, out_dir) -> list:
    """The incident as inputs: prefill's and both decode hosts' journal exports, and the
    results; the paths."""
    from pathlib import Path

    from .incident import write_export, write_results

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    return [
        write_export(inc.prefill, d / "prefill-0.export"),
        write_export(inc.decode, d / "decode.export"),
        write_results(inc.results, d / "results.jsonl"),
    ]
