"""Reproducer benchmark: is the harness ever the bottleneck of the load it makes?

    python3 bench/repro.py [--sessions 200] [--rounds 8] [--servers 2] [--seconds 6]

Starts the stand-in model server (tests/model_server.py, aiohttp, no faults, 2 ms a reply)
as `--servers` processes sharing one port, then measures in this one run, against it:

- `forensics repro` with the built-in scenario (long contexts, tools), non-streaming and
  streaming: requests/s, the harness's CPU per request (its own process), the servers'
  share of the machine;
- baselines on the same server and the same kind of body (a session's request after
  four rounds): a bare loop of aiohttp's client, and a bare loop of the harness's own
  HTTP client (forensics.repro.http), `--sessions` at once, each POST, read, parse;
- latency overhead: one session, one request at a time; then the bare client replays the
  very bodies that session sent, one at a time. The harness's own time per request is the
  difference of the two runs' elapsed times over the request count (both sequential: no
  overlap can hide it).

Ratios are within this run. Prints a Markdown table; writes bench/out/repro.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # tests.model_server

from forensics.repro import load_scenario, repro  # noqa: E402
from forensics.repro.http import Client  # noqa: E402
from forensics.repro.sessions import Conversation, Plan, body, system_message  # noqa: E402


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers(n: int) -> tuple[list[subprocess.Popen], str]:
    port = free_port()
    procs = []
    for _ in range(n):
        p = subprocess.Popen(
            [sys.executable, "-m", "tests.model_server", "--port", str(port), "--reuse-port"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        line = p.stdout.readline() if p.stdout else ""
        if "listening" not in line:
            raise SystemExit(f"model server did not start: {line!r}")
        procs.append(p)
    return procs, f"http://127.0.0.1:{port}"


def typical_body(model: str) -> bytes:
    """A session's request after four rounds of the built-in scenario."""
    sc = load_scenario()
    plan = Plan(sc, model, 8, 0, False, sc.temperature)
    conv = Conversation()
    conv.add(system_message(plan, 0))
    for r in range(4):
        conv.add({"role": "user", "content": sc.turns[r]})
        conv.add({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{r}",
                  "type": "function", "function": {"name": "read_file",
                  "arguments": '{"path": "src/disaggregation/decode.py"}'}}]})  # fmt: skip
        conv.add({"role": "tool", "tool_call_id": f"c{r}", "content": "x" * sc.tool_result_chars})
        conv.add({"role": "assistant", "content": "The timeout is set in the poll loop. " * 8})
    return body(plan, conv, "0" * 32, (0, 4, 0))


async def bare_lean(url: str, data: bytes, sessions: int, seconds: float) -> tuple[int, list]:
    client = Client(url, max_connections=sessions)
    done, lat = 0, []
    stop = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            t = time.perf_counter()
            resp = await client.request("POST", "/v1/chat/completions", data)
            orjson.loads(resp.body)
            lat.append(time.perf_counter() - t)
            done += 1

    await asyncio.gather(*(loop() for _ in range(sessions)))
    client.close()
    return done, lat


async def bare_aiohttp(url: str, data: bytes, sessions: int, seconds: float) -> tuple[int, list]:
    import aiohttp

    done, lat = 0, []
    stop = time.perf_counter() + seconds
    conn = aiohttp.TCPConnector(limit=sessions)
    async with aiohttp.ClientSession(connector=conn, cookie_jar=aiohttp.DummyCookieJar()) as s:

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                t = time.perf_counter()
                async with s.post(f"{url}/v1/chat/completions", data=data,
                                  headers={"Content-Type": "application/json"}) as r:  # fmt: skip
                    orjson.loads(await r.read())
                lat.append(time.perf_counter() - t)
                done += 1

        await asyncio.gather(*(loop() for _ in range(sessions)))
    return done, lat


def measure(fn, servers: list[int]) -> dict:
    c0, s0, t0 = cpu_s(), proc_cpu_s(servers), time.perf_counter()
    n, lat = fn()
    wall = time.perf_counter() - t0
    cpu, scpu = cpu_s() - c0, proc_cpu_s(servers) - s0
    return {
        "requests": n, "wall_s": wall, "per_s": n / wall, "client_us": 1e6 * cpu / n,
        "client_share": cpu / wall, "server_share": scpu / wall,
        "p50_ms": 1000 * statistics.median(lat) if lat else None,
    }  # fmt: skip


def harness(url: str, sessions: int, rounds: int, stream: bool, tmp: Path,
            servers: list[int]) -> dict:  # fmt: skip
    out = tmp / f"r-{sessions}-{stream}.jsonl"

    def run() -> tuple[int, list]:
        res = repro(url, sessions=sessions, rounds=rounds, out=out, stream=stream,
                    timeout=60, overwrite=True)  # fmt: skip
        stats = res.runs[0]
        assert stats.statuses["ok"] == stats.requests, stats.statuses
        return stats.requests, stats.latencies

    return measure(run, servers)


def single_session(url: str, rounds: int, tmp: Path) -> tuple[dict, dict]:
    """One session, then a bare replay of exactly the bodies it sent."""
    sent: list[bytes] = []
    original = Client.request

    async def recording(self, method, path, body=b"", **kw):  # type: ignore[no-untyped-def]
        if method == "POST":
            sent.append(body)
        return await original(self, method, path, body, **kw)

    Client.request = recording  # type: ignore[method-assign]
    try:
        res = repro(url, sessions=1, rounds=rounds, out=tmp / "one.jsonl", timeout=60,
                    overwrite=True)  # fmt: skip
    finally:
        Client.request = original  # type: ignore[method-assign]
    stats = res.runs[0]

    async def replay() -> tuple[float, list[float]]:
        client = Client(url, max_connections=1)
        lat = []
        t0 = time.perf_counter()
        for data in sent:
            t = time.perf_counter()
            orjson.loads((await client.request("POST", "/v1/chat/completions", data)).body)
            lat.append(time.perf_counter() - t)
        client.close()
        return time.perf_counter() - t0, lat

    wall, lat = asyncio.run(replay())
    n = len(sent)
    one = {"requests": n, "elapsed_s": stats.elapsed, "per_s": n / stats.elapsed,
           "p50_ms": stats.latency_ms(0.5)}  # fmt: skip
    bare = {"requests": n, "elapsed_s": wall, "per_s": n / wall,
            "p50_ms": 1000 * statistics.median(lat)}  # fmt: skip
    return one, bare


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=6.0)
    a = ap.parse_args(argv)
    procs, url = start_servers(a.servers)
    pids = [p.pid for p in procs]
    rows: dict[str, dict] = {}
    try:
        data = typical_body("test-model")
        with tempfile.TemporaryDirectory(prefix="repro-bench-") as tmp:
            t = Path(tmp)
            harness(url, 20, 1, False, t, pids)  # warm the servers up
            rows["repro, non-streaming"] = harness(url, a.sessions, a.rounds, False, t, pids)
            rows["repro, streaming"] = harness(url, a.sessions, a.rounds, True, t, pids)
            rows["bare loop, repro's HTTP client"] = measure(
                lambda: asyncio.run(bare_lean(url, data, a.sessions, a.seconds)), pids
            )
            rows["bare loop, aiohttp's client"] = measure(
                lambda: asyncio.run(bare_aiohttp(url, data, a.sessions, a.seconds)), pids
            )
            one, bare = single_session(url, 4 * a.rounds, t)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    print(f"\nreproducer, {a.sessions} sessions, {a.servers} stand-in server processes, "
          f"{os.cpu_count()} cores, one run:\n")  # fmt: skip
    print("| load | requests/s | harness CPU µs/request | harness cores | server cores | p50 |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        cores = f"{r['client_share']:.2f} | {r['server_share']:.2f}"
        print(f"| {name} | {r['per_s']:,.0f} | {r['client_us']:,.0f} | {cores} | "
              f"{r['p50_ms']:.1f} ms |")  # fmt: skip
    main_row = rows["repro, non-streaming"]
    lean, aio = rows["bare loop, repro's HTTP client"], rows["bare loop, aiohttp's client"]
    print(f"\nharness CPU per request vs aiohttp's bare client: "
          f"{main_row['client_us'] / aio['client_us']:.2f}×; vs its own bare client "
          f"{main_row['client_us'] / lean['client_us']:.2f}×")  # fmt: skip
    extra = 1e6 * (one["elapsed_s"] - bare["elapsed_s"]) / one["requests"]
    print(f"one session, {one['requests']} requests in sequence: repro {one['elapsed_s']:.3f} s "
          f"(p50 {one['p50_ms']:.2f} ms), the same bodies replayed bare "
          f"{bare['elapsed_s']:.3f} s (p50 {bare['p50_ms']:.2f} ms): the harness adds "
          f"{extra:,.0f} µs a request")  # fmt: skip
    rows["one session"] = one
    rows["one session, bare replay"] = bare
    (HERE / "out").mkdir(exist_ok=True)
    (HERE / "out" / "repro.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
