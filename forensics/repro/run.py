"""`repro`: runs of concurrent sessions against a server, one results file, live counts.

The results file (JSON lines) holds, per run, a header line (`{"forensics_run": NAME, …}`:
URL, model, scenario and its sha256, seed, sessions, tags), one line per request, and an
end line (`{"forensics_run_end": NAME, …}`, with `interrupted`). `forensics ingest` reads
each run under its own name. A sweep (`sessions=[10, 20, 40]`) writes one run per level;
`golden=True` first writes a `-solo` run: every session alone, one request at a time.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import orjson

from ..errors import ForensicsError
from ..statuses import NO_REPLY, UNCOMPARED
from .crosstalk import CrossTalk
from .exchange import Outcome, Request, send
from .http import Client, TransportError
from .probe import probe, server_info
from .scenario import Scenario, load_scenario
from .sessions import Key, Plan, followed, run_session
from .validators import Reply, Validators

TICK_S = 0.25  # how often progress is reported
GOLDEN_TRIES = 3  # a solo request that got no reply is sent this often in all


@dataclass
class RunStats:
    """What one run found so far (the live display and the closing summary)."""

    run: str
    sessions: int
    rounds_total: int
    rounds_done: int = 0
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    elapsed: float = 0.0
    interrupted: bool = False
    first_failure: str | None = None  # the first request without a reply: what went wrong
    _sorted: list[float] = field(default_factory=list, repr=False)

    @property
    def corrupted(self) -> int:
        return self.statuses["corrupted"]

    @property
    def failed(self) -> int:
        """Requests with no reply (http_error, timeout)."""
        return sum(self.statuses[s] for s in NO_REPLY)

    @property
    def uncompared(self) -> int:
        """Loaded requests whose solo twin had no reply (`--golden`): no verdict."""
        return self.statuses[UNCOMPARED]

    @property
    def judged(self) -> int:
        """Requests with a verdict: the rate's denominator."""
        return self.requests - self.failed - self.uncompared

    def rate(self) -> tuple[float | None, float | None, float | None]:
        from ..analyses.stats import wilson

        n, k = self.judged, self.corrupted
        low, high = wilson(k, n)
        return (k / n if n else None), low, high

    def latency_ms(self, q: float) -> float | None:
        if not self.latencies:
            return None
        if len(self._sorted) < len(self.latencies):
            # merge what came since the last call: the live display asks four times a
            # second, and sorting 100 k latencies each time would cost the harness a core
            new = sorted(self.latencies[len(self._sorted) :])
            self._sorted = sorted(self._sorted + new)  # two sorted runs: a linear merge
        xs = self._sorted
        return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]

    def per_second(self) -> float:
        t = self.elapsed or (time.perf_counter() - self.started)
        return self.requests / t if t > 0 else 0.0

    def add(self, out: Outcome) -> None:
        self.requests += 1
        self.statuses[out.status] += 1
        self.reasons.update(out.reasons)
        self.latencies.append(out.latency)
        if self.first_failure is None and out.status in NO_REPLY:
            self.first_failure = "; ".join(out.details.values()) or out.status

    def as_dict(self) -> dict:
        rate, low, high = self.rate()
        return {
            "run": self.run, "sessions": self.sessions, "requests": self.requests,
            "judged": self.judged, "corrupted": self.corrupted, "failed": self.failed,
            "uncompared": self.uncompared,
            "rate": rate, "rate_low": low, "rate_high": high,
            "statuses": dict(self.statuses), "reasons": dict(self.reasons),
            "p50_ms": self.latency_ms(0.5), "p99_ms": self.latency_ms(0.99),
            "requests_per_s": self.per_second(), "elapsed_s": self.elapsed,
            "interrupted": self.interrupted,
        }  # fmt: skip


@dataclass
class ReproResult:
    out: Path
    runs: list[RunStats]
    interrupted: bool = False

    def as_dict(self) -> dict:
        return {"out": str(self.out), "interrupted": self.interrupted,
                "runs": [r.as_dict() for r in self.runs]}  # fmt: skip


Progress = Callable[[RunStats], None]


class _Writer:
    """The results file, a line per finished request, flushed as it goes (a kill keeps
    every result written before it)."""

    def __init__(self, path: Path, overwrite: bool) -> None:
        try:
            self.fh = open(path, "wb" if overwrite else "xb")  # noqa: SIM115
        except FileExistsError:
            raise ForensicsError(f"{path} exists: choose another --out, or --overwrite") from None
        except OSError as exc:
            raise ForensicsError(f"cannot write {path}: {exc.strerror}") from None
        self._fd = os.environ.get("FORENSICS_PROGRESS_FD")

    def line(self, obj: dict) -> None:
        self.fh.write(orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE))
        self.fh.flush()

    def result(self, obj: dict) -> None:
        self.line(obj)
        if self._fd:  # for wrappers (and the test that interrupts a run mid-way)
            os.write(int(self._fd), b"result\n")

    def close(self) -> None:
        self.fh.close()


def _row(key: Key, req: Request, out: Outcome, inflight: int) -> dict:
    session, rnd, step = key
    row: dict = {
        "session": str(session), "round": rnd, "step": step, "rid": req.rid,
        "start": round(out.start, 6), "end": round(out.end, 6), "concurrency": inflight,
        "status": out.status, "corrupted": out.corrupted,
        "reason": ",".join(out.reasons) or None, "attempt": req.attempt,
    }  # fmt: skip
    if out.details:
        row["details"] = out.details
    row["latency_ms"] = round(out.latency * 1000, 3)
    if out.ttft is not None:
        row["ttft_ms"] = round(out.ttft * 1000, 3)
    row["http_status"] = out.http_status
    r = out.reply
    if r is not None:
        row["finish_reason"] = r.finish_reason
        row["tool_calls"] = len(r.tool_calls)
        if r.id is not None:
            row["response_id"] = r.id
        if isinstance(r.usage, dict):
            row["usage"] = {k: r.usage[k] for k in ("prompt_tokens", "completion_tokens")
                            if k in r.usage}  # fmt: skip
        if r.meta_info:
            row["meta_info"] = _meta(r.meta_info)
    return row


def _meta(meta: dict) -> dict:
    """SGLang's meta_info without what grows with the reply (token ids, logprobs): the
    scalars (num_retractions, cached_tokens, the server's id, dp_rank, e2e_latency, the
    metrics timestamps) and finish_reason."""

    def small(k: str, v: object) -> bool:
        if v is None or isinstance(v, bool | int | float):
            return True
        return len(v) <= 200 if isinstance(v, str) else k == "finish_reason" and isinstance(v, dict)

    return {k: v for k, v in meta.items() if small(k, v)}


class _Runner:
    def __init__(self, client: Client, plan: Plan, validators: Validators, timeout: float,
                 writer: _Writer, progress: Progress | None) -> None:  # fmt: skip
        self.client, self.plan, self.validators = client, plan, validators
        self.timeout, self.writer, self.progress = timeout, writer, progress
        self.inflight = 0

    async def run(self, name: str, sessions: int, header: dict, solo: bool,
                  golden: dict[Key, Reply | None] | None, keep: dict[Key, Reply | None] | None,
                  into: list[RunStats]) -> None:  # fmt: skip
        """One run: `sessions` concurrent sessions (or, `solo`, one after another); its
        stats go `into` the list first, so that an interrupted run is counted too. A solo
        run sends a failed request up to three times: its reply is what the loaded twin
        is compared with."""
        plan = self.plan
        if solo:
            plan = replace(plan, retries=max(plan.retries, GOLDEN_TRIES - 1))
        prompts = CrossTalk()
        stats = RunStats(name, sessions, sessions * plan.rounds)
        into.append(stats)
        self.writer.line({"forensics_run": name, **header, "sessions": sessions,
                          "solo": solo, "retries": plan.retries,
                          "started": datetime.now(UTC).isoformat()})  # fmt: skip

        async def one(key: Key, req: Request) -> Outcome:
            self.inflight += 1
            inflight = self.inflight
            try:
                out = await send(self.client, req, self.validators, self.timeout,
                                 (prompts, key[0]))  # fmt: skip
            finally:
                self.inflight -= 1
            stats.add(out)
            self.writer.result(_row(key, req, out, inflight))
            if keep is not None:
                keep[key] = followed(out)  # the last attempt is the one the session went on from
            return out

        def round_done() -> None:
            stats.rounds_done += 1

        ticker = asyncio.create_task(self._tick(stats)) if self.progress else None
        try:
            if solo:
                for s in range(sessions):
                    await run_session(plan, s, one, golden, round_done, prompts)
            else:
                await asyncio.gather(*(run_session(plan, s, one, golden, round_done, prompts)
                                       for s in range(sessions)))  # fmt: skip
        except asyncio.CancelledError:
            stats.interrupted = True
            raise
        finally:
            self._ended(name, stats, ticker)

    def _ended(self, name: str, stats: RunStats, ticker: asyncio.Task | None) -> None:
        """A run's end line (interrupted or not) and its last progress report."""
        stats.elapsed = time.perf_counter() - stats.started
        if ticker is not None:
            ticker.cancel()
        self.writer.line({"forensics_run_end": name, "requests": stats.requests,
                          "interrupted": stats.interrupted,
                          "elapsed_s": round(stats.elapsed, 3)})  # fmt: skip
        if self.progress:
            self.progress(stats)

    async def _tick(self, stats: RunStats) -> None:
        assert self.progress is not None
        while True:
            self.progress(stats)
            await asyncio.sleep(TICK_S)


def run_names(base: str, levels: Sequence[int]) -> list[str]:
    return [base] if len(levels) == 1 else [f"{base}-s{n}" for n in levels]


def repro(
    url: str,
    *,
    sessions: int | Sequence[int] = 60,
    rounds: int = 8,
    model: str | None = None,
    run: str = "repro",
    tags: dict[str, str] | None = None,
    out: str | os.PathLike = "results.jsonl",
    scenario: Scenario | str | os.PathLike | None = None,
    golden: bool = False,
    timeout: float = 120.0,
    seed: int = 0,
    stream: bool | None = None,
    api_key: str | None = None,
    overwrite: bool = False,
    retries: int = 0,
    progress: Progress | None = None,
) -> ReproResult:
    """Drive `url` (an OpenAI-compatible server) with concurrent agent sessions and write one
    result per request to `out`. A list of `sessions` levels is a sweep: one run per level.
    Interrupted (Ctrl-C), it returns what finished (`interrupted=True`); the file keeps it.
    `retries`: send a failed request (http_error, timeout) again, up to that many times,
    each attempt a result of its own (off by default: a retry hides the failure measured)."""
    levels = [sessions] if isinstance(sessions, int) else list(sessions)
    if not levels or any(n < 1 for n in levels):
        raise ForensicsError("--sessions needs whole numbers ≥ 1")
    if rounds < 1:
        raise ForensicsError("--rounds must be ≥ 1")
    if not timeout > 0:
        raise ForensicsError("--timeout must be > 0 seconds")
    if retries < 0:
        raise ForensicsError("--retries must be ≥ 0")
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    # OpenAI clients take a base URL ending in /v1: the same URL works here.
    url = url.rstrip("/").removesuffix("/v1")
    try:
        Client(url)
    except ValueError as exc:
        raise ForensicsError(str(exc)) from None
    path = Path(out)
    if path.exists() and not overwrite:
        raise ForensicsError(f"{path} exists: choose another --out, or --overwrite")
    result = ReproResult(path, [])
    previous = signal.getsignal(signal.SIGINT)
    try:
        asyncio.run(_main(url, levels, rounds, model, run, tags or {}, path, sc, golden,
                          timeout, seed, stream, api_key, overwrite, retries, progress,
                          result))  # fmt: skip
    except (KeyboardInterrupt, asyncio.CancelledError):
        result.interrupted = True
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)
    if not result.interrupted:
        _some_reply(result)
    return result


def _some_reply(result: ReproResult) -> None:
    """A run in which no request got a reply measured nothing: it fails, in one line."""
    sent = sum(r.requests for r in result.runs)
    if sent and sent == sum(r.failed for r in result.runs):
        first = next(r.first_failure for r in result.runs if r.first_failure)
        raise ForensicsError(f"no request got a reply ({sent:,} sent; the first: {first}); "
                             f"the server is down, or the URL or model is wrong "
                             f"(results in {result.out})")  # fmt: skip


def _stop_on_sigint() -> None:
    """Ctrl-C cancels the run (every session's finally runs, the file is closed) rather
    than raising wherever the interpreter happens to be."""
    if threading.current_thread() is not threading.main_thread():
        return
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, task.cancel)


async def _model(client: Client, timeout: float) -> str:
    try:
        async with asyncio.timeout(timeout):
            resp = await client.request("GET", "/v1/models")
        ids = [m["id"] for m in orjson.loads(resp.body)["data"]]
    except (TimeoutError, TransportError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise ForensicsError(f"cannot list the server's models ({exc or 'timeout'}): "
                             "pass --model") from None  # fmt: skip
    if resp.status != 200 or not ids:
        raise ForensicsError(f"the server lists no model (HTTP {resp.status}): pass --model")
    return str(ids[0])


async def _main(url: str, levels: list[int], rounds: int, model: str | None, base: str,
                tags: dict[str, str], path: Path, sc: Scenario, golden: bool, timeout: float,
                seed: int, stream: bool | None, api_key: str | None, overwrite: bool,
                retries: int, progress: Progress | None, result: ReproResult) -> None:  # fmt: skip
    _stop_on_sigint()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client = Client(url, max_connections=max(levels) + 8, headers=headers)
    try:
        model = model or await _model(client, timeout)
        tried = await probe(client, url, model, timeout)
        info = await server_info(client, timeout)
        streamed = sc.stream if stream is None else stream
        # SGLang returns meta_info only without streaming
        meta = not streamed and "return_meta_info" not in tried.dropped
        plan = Plan(sc, model, rounds, seed, streamed, 0.0 if golden else sc.temperature,
                    retries, meta, frozenset(tried.dropped))  # fmt: skip
        validators = Validators({t.name: t.parameters for t in sc.tools}, sc.markup)
        header = {
            "url": url, "model": model, "scenario": sc.name, "scenario_sha256": sc.sha256,
            "seed": seed, "rounds": rounds, "golden": golden, "stream": plan.stream,
            "temperature": plan.temperature, "timeout_s": timeout, "retries": retries,
            "dropped_fields": tried.dropped, "probe": tried.as_header(),
            "meta_info": "on" if meta else "off: streamed" if streamed else "off: refused",
            "tags": tags,
        }  # fmt: skip
        if info is not None:
            header["server_info_path"], header["server_info"] = info
        writer = _Writer(path, overwrite)
        runner = _Runner(client, plan, validators, timeout, writer, progress)
        try:
            solo: dict[Key, Reply | None] | None = None
            if golden:
                solo = {}
                await runner.run(f"{base}-solo", max(levels), header, True, None, solo,
                                 result.runs)  # fmt: skip
            for name, n in zip(run_names(base, levels), levels, strict=True):
                await runner.run(name, n, header, False, solo, None, result.runs)
        except asyncio.CancelledError:
            result.interrupted = True
            raise
        finally:
            writer.close()
    finally:
        client.close()


__all__ = ["ReproResult", "RunStats", "repro", "run_names"]
