"""The reproducer's parts: validators, the HTTP client against misbehaving servers, the
scenario file, and the run headers of its results file."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from forensics.parsers.journald.context import ReadContext
from forensics.parsers.results import read_results, sniff_results

import forensics
from forensics.errors import ForensicsError
from forensics.repro import MARKUP, Reply, ToolCall, Validators, load_scenario
from forensics.repro.exchange import Request, send
from forensics.repro.http import Client
from forensics.repro.scenario import filler
from forensics.repro.validators import diverged

DATA = Path(__file__).parent / "data"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"},
          "n": {"type": "integer", "minimum": 1}}, "required": ["path"],
          "additionalProperties": False}  # fmt: skip


def test_tool_json_names_what_is_wrong() -> None:
    v = Validators({"read": SCHEMA})

    def check(name: str, args: str) -> str | None:
        return v.tool_json(Reply(tool_calls=[ToolCall(name, args)]))

    assert check("read", '{"path": "a.py", "n": 3}') is None
    assert "undeclared tool 'write'" in check("write", '{"path": "a"}')
    assert "not JSON" in check("read", '{"path": "a.py",')
    assert "must be string" in check("read", '{"path": [1]}')
    assert "must contain" in check("read", '{"n": 2}')  # a required property missing
    assert check("read", '{"path": "a", "x": 1}') is not None  # additionalProperties
    assert check("read", '{"path": "a", "n": 0}') is not None  # minimum
    assert v.tool_json(Reply("no calls")) is None


def test_every_markup_string_is_a_leak_in_content_and_only_there() -> None:
    v = Validators({}, markup=["<<MY_TOOL>>"])
    for marker in (*MARKUP, "<<MY_TOOL>>"):
        found = v.markup_leak(Reply(f"The answer is 4. {marker}read_file"))
        assert found == f"{marker!r} at offset 17", marker
    clean = Reply("Use a list comprehension; 3 < 4 and <b>bold</b> are fine.",
                  [ToolCall("read", '{"path": "<tool_call>"}')])  # fmt: skip
    assert v.markup_leak(clean) is None  # tool-call arguments are not content


def test_diverged_gives_the_first_differing_offset() -> None:
    assert diverged("same", "same") is None
    assert diverged("abXd", "abcd") == "first difference at offset 2 (reply 4, solo 4 chars)"
    assert diverged("abc", "abcd") == "first difference at offset 3 (reply 3, solo 4 chars)"
    assert diverged("abc", "abcd", cut=True) is None  # cut short, but what came agrees
    assert diverged("abX", "abcd", cut=True) is not None
    assert diverged("abcde", "abcd", cut=True) is not None
    a = Reply("x", [ToolCall("read", '{"path": "a"}')])
    b = Reply("x", [ToolCall("read", '{"path": "b"}')])
    assert diverged(a.text(), b.text()) is not None


def test_scenario_built_in_and_checked(tmp_path: Path) -> None:
    sc = load_scenario()
    assert sc.name == "agentic-long-context" and len(sc.tools) == 4 and len(sc.sha256) == 64
    for tool in sc.tools:  # every built-in tool schema compiles and accepts a plain call
        assert Validators({tool.name: tool.parameters}) is not None
    bad = {
        'name = "x"\nturns = ["a"]\nrounds = 3\n': "unknown key 'rounds'",
        'turns = ["a"]\n': "needs a name",
        'name = "x"\nturns = []\n': "needs turns",
        'name = "x"\nturns = ["a"]\ntemperature = 3\n': "temperature",
        'name = "x"\nturns = ["a"]\n[[tools]]\nname = "t"\n[[tools]]\nname = "t"\n': "one name",
        'name = "x"\nturns = ["a"]\ntool_steps = -1\n': "tool_steps",
        'name = "x"\nturns = ["a"\n': "scenario",
    }
    for i, (text, needle) in enumerate(bad.items()):
        p = tmp_path / f"s{i}.toml"
        p.write_text(text)
        with pytest.raises(ForensicsError, match=needle):
            load_scenario(p)
    with pytest.raises(ForensicsError, match="cannot read"):
        load_scenario(tmp_path / "missing.toml")


def test_filler_is_a_pure_function_of_its_key() -> None:
    a, b = filler("k1", 5000), filler("k2", 5000)
    assert len(a) == len(b) == 5000 and a != b and filler("k1", 5000) == a
    assert filler("k", 0) == "" and len(filler("k", 3_000_000)) == 3_000_000


# The HTTP client against servers that misbehave in the ways a loaded server does.

Handler = Callable[[bytes], list[bytes]]  # request bytes -> what to send, then close


def _serve(handler: Handler, close: bool):
    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))  # fmt: skip
            body = await reader.readexactly(length)
            for part in handler(head + body):
                writer.write(part)
            await writer.drain()
            if close:
                writer.close()
                return

    return on_client


def _exchange(handler: Handler, close: bool = True, requests: int = 1, stream: bool = False):
    async def main():
        server = await asyncio.start_server(_serve(handler, close), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = Client(f"http://127.0.0.1:{port}")
        v = Validators({})
        outs = []
        for i in range(requests):
            req = Request(orjson.dumps({"rid": f"r{i}"}), f"r{i}", stream)
            outs.append(await send(client, req, v, timeout=2.0))
        client.close()
        server.close()
        await server.wait_closed()
        return outs

    return asyncio.run(main())


COMPLETION = orjson.dumps({"id": "x", "choices": [{"message": {"content": "hi"},
                                                    "finish_reason": "stop"}]})  # fmt: skip


def test_http_responses_a_server_may_send() -> None:
    ok = [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(COMPLETION) + COMPLETION]
    # kept alive: three requests on one connection
    (a, b, c) = _exchange(lambda _: ok, close=False, requests=3)
    assert a.status == b.status == c.status == "ok" and c.reply.content == "hi"
    # closed after each without saying so: the next request, sent into a connection the
    # server had closed before reading it, goes again on a fresh one
    assert [o.status for o in _exchange(lambda _: ok, close=True, requests=3)] == ["ok"] * 3
    said = [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
            % len(COMPLETION) + COMPLETION]  # fmt: skip
    assert [o.status for o in _exchange(lambda _: said, close=True, requests=3)] == ["ok"] * 3
    # no length, body ends at close (HTTP/1.0 style)
    eof = [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + COMPLETION]
    assert _exchange(lambda _: eof)[0].status == "ok"
    # chunked
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
               b"%x\r\n" % len(COMPLETION) + COMPLETION + b"\r\n0\r\n\r\n"]  # fmt: skip
    assert _exchange(lambda _: chunked)[0].status == "ok"


@pytest.mark.parametrize(
    ("reply", "detail"),
    [
        ([b"HTTP/1.1 500 Internal\r\nContent-Length: 33\r\n\r\n{\"message\": \"KV cache exhausted\"}"],
         "HTTP 500 KV cache exhausted"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nnot j"], "body is not JSON"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"], "not a chat completion"),
        ([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"id\""], "inside the body"),
        ([b"garbage\r\n\r\n"], "malformed HTTP response"),
        ([], "connection closed before a response"),
    ],
    ids=["500", "not-json", "not-completion", "cut-body", "garbage", "closed"],
)  # fmt: skip
def test_http_failures_are_http_errors_with_their_reason(reply: list[bytes], detail: str) -> None:
    (out,) = _exchange(lambda _: reply)
    assert out.status == "http_error" and not out.corrupted
    assert detail in out.details["http_error"]


def test_stream_cut_short_is_truncated_and_still_checked_for_markup() -> None:
    def events(*chunks: dict) -> bytes:
        return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    delta = {"choices": [{"delta": {"content": "Reading <|tool_call|>"}}]}
    (out,) = _exchange(lambda _: [head + events(delta)], stream=True)
    assert out.status == "corrupted" and out.reasons == ["markup_leak", "truncated"]
    clean = {"choices": [{"delta": {"content": "Reading"}}]}
    (out,) = _exchange(lambda _: [head + events(clean)], stream=True)
    assert out.status == "truncated" and "without its end" in out.details["truncated"]
    done = (
        events(clean, {"choices": [{"delta": {}, "finish_reason": "stop"}]}) + b"data: [DONE]\n\n"
    )
    (out,) = _exchange(lambda _: [head + done], stream=True)
    assert out.status == "ok" and out.reply.content == "Reading"
    err = events({"error": {"message": "overloaded"}})
    (out,) = _exchange(lambda _: [head + err], stream=True)
    assert out.status == "http_error" and "overloaded" in out.details["http_error"]
    # an error status on a streamed request: its body is the error, not events
    refused = b'{"message": "context too long"}'
    reply = b"HTTP/1.1 400 Bad\r\nContent-Length: %d\r\n\r\n" % len(refused) + refused
    (out,) = _exchange(lambda _: [reply], stream=True)
    assert out.details["http_error"] == "HTTP 400 context too long"


def test_timeout_is_not_corruption() -> None:
    async def main():
        async def never(reader, writer):
            await reader.read(1 << 16)
            await asyncio.Event().wait()

        server = await asyncio.start_server(never, "127.0.0.1", 0)
        client = Client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        out = await send(client, Request(b"{}", "r", False), Validators({}), timeout=0.2)
        server.close()
        return out

    out = asyncio.run(main())
    assert out.status == "timeout" and out.reasons == ["timeout"] and not out.corrupted


# The results file's run headers, as ingest reads them.


def test_run_headers_name_runs_and_tag_them(tmp_path: Path) -> None:
    lines = [
        {"session": "0", "rid": "before", "corrupted": False},  # no header yet: --run
        {"forensics_run": "flag-on", "model": "m", "seed": 3, "golden": False,
         "tags": {"overlap": "1"}},
        {"session": "0", "rid": "a", "corrupted": True, "status": "corrupted"},
        {"session": "1", "rid": "b", "corrupted": False, "status": "timeout"},
        {"forensics_run_end": "flag-on", "requests": 2, "interrupted": True},
        {"forensics_run": ""},  # no name: quarantined, the rows after stay in flag-on
        {"session": "2", "rid": "c", "corrupted": False, "status": "ok"},
    ]  # fmt: skip
    data = b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
    assert sniff_results(data[data.index(b"\n") + 1 :]) == "results-jsonl"  # header first
    ctx = ReadContext(name="r.jsonl")
    runs: dict = {}
    table = read_results(io.BytesIO(data), "results-jsonl", ctx, runs)
    assert table.column("run").to_pylist() == [None, "flag-on", "flag-on", "flag-on"]
    assert table.column("status").to_pylist() == [None, "corrupted", "timeout", "ok"]
    assert runs == {"flag-on": {"model": "m", "seed": "3", "golden": "false", "overlap": "1",
                                "interrupted": "true"}}  # fmt: skip
    assert [q.line for q in ctx.quarantine] == [6] and ctx.markers == 2 and ctx.lines == 7
    path = tmp_path / "r.jsonl"
    path.write_bytes(data)
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(path)], db, tags={"host": "h1"})  # no --run: the headers name them
    with forensics.connect_read_only(db) as con:
        got = con.execute("SELECT run, rid, status FROM results ORDER BY line").fetchall()
        tags = dict(con.execute("SELECT run, tags FROM runs").fetchall())
    assert got == [("default", "before", None), ("flag-on", "a", "corrupted"),
                   ("flag-on", "b", "timeout"), ("flag-on", "c", "ok")]  # fmt: skip
    assert tags["flag-on"]["overlap"] == "1" and tags["flag-on"]["host"] == "h1"
    named = tmp_path / "n.duckdb"  # a --run given wins over the header, tags kept
    forensics.ingest([str(path)], named, run="base", tags={"host": "h1"})
    with forensics.connect_read_only(named) as con:
        got = con.execute("SELECT DISTINCT run FROM results").fetchall()
        tags = dict(con.execute("SELECT run, tags FROM runs").fetchall())
    assert got == [("base",)] and tags["base"]["overlap"] == "1"


def test_golden_replay_goes_where_the_solo_session_went() -> None:
    from forensics.repro import Scenario, Tool
    from forensics.repro.exchange import Outcome
    from forensics.repro.sessions import Plan, run_session

    sc = Scenario("t", ("go",), tools=(Tool("read", "", {"type": "object"}),), tool_steps=3)
    plan = Plan(sc, "m", 1, 0, False, 0.0)
    asks = Reply("", [ToolCall("read", '{"path": "a"}')])  # this model always calls a tool
    sent: list[tuple] = []

    async def send(key, req):
        sent.append(key)
        return Outcome("ok", [], {}, asks, 0.0, 0.0, 0.0)

    asyncio.run(run_session(plan, 0, send))  # on its own: every tool step of the round
    assert sent == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3)]
    # the solo round ended at step 1 (its reply there was cut): the replay ends there too,
    # and at step 0 it follows the solo reply, corrupted or not, not its own
    sent.clear()
    solo = Reply("<|tool_call|>", [ToolCall("read", '{"path": "b"}')])
    asyncio.run(run_session(plan, 0, send, {(0, 0, 0): solo, (0, 0, 1): None}))
    assert sent == [(0, 0, 0), (0, 0, 1)]


def test_replies_of_unexpected_shapes_never_raise() -> None:
    def ok(body: bytes) -> list[bytes]:
        return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body]

    # content as parts (some servers), a tool name that is a number: judged, not crashed
    parts = orjson.dumps({"choices": [{"message": {"content": [
        {"type": "text", "text": "Done <tool_call>"}], "tool_calls": [
        {"function": {"name": 7, "arguments": {"path": "a"}}}]}, "finish_reason": "stop"}]})  # fmt: skip
    (out,) = _exchange(lambda _: ok(parts))
    assert out.status == "corrupted" and out.reasons == ["markup_leak", "tool_json"]
    assert out.reply.content == "Done <tool_call>"
    assert "undeclared tool '7'" in out.details["tool_json"]
    for body in (b'{"choices": "x"}', b'{"choices": [{"message": 3}]}', b"[1, 2]",
                 b'{"choices": [{"message": {"tool_calls": [{"function": null}]}}]}'):  # fmt: skip
        (out,) = _exchange(lambda _, b=body: ok(b))
        assert out.status == "http_error" and "not a chat completion" in out.details["http_error"]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    odd = b'data: {"choices": [{"delta": "text"}]}\n\ndata: [DONE]\n\n'
    (out,) = _exchange(lambda _: [head + odd], stream=True)
    assert out.status == "http_error" and "not a chat completion chunk" in out.details["http_error"]


def test_an_sglang_stream_from_public_reports() -> None:
    """SGLang's response head and reasoning deltas (sglang#4700, #9657) and the tool-call
    deltas quoted in #4700, served chunked over real HTTP: one clean tool call."""
    rows = [line.split("\t", 1)[1] for line in
            (DATA / "sglang-sse-real.tsv").read_text().splitlines() if not line.startswith("#")]  # fmt: skip
    head = [r for r in rows if not r.startswith("data:")]
    events = [r for r in rows if r.startswith("data:")]
    # chunked as uvicorn sends it: a chunk per event
    chunks = b"".join(b"%x\r\n" % (len(e) + 2) + e.encode() + b"\n\n\r\n" for e in events)
    reply = [("\r\n".join(head) + "\r\n\r\n").encode(), chunks + b"0\r\n\r\n"]
    assert len(events) == 13 and "transfer-encoding: chunked" in head
    weather = {"type": "object", "properties": {"location": {"type": "string"}},
               "required": ["location"]}  # fmt: skip

    async def main():
        server = await asyncio.start_server(_serve(lambda _: reply, False), "127.0.0.1", 0)
        client = Client(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        out = await send(client, Request(b"{}", "r", True), Validators({"get_weather": weather}),
                         timeout=2.0)  # fmt: skip
        client.close()
        server.close()
        return out

    out = asyncio.run(main())
    assert out.status == "ok", out.details
    assert out.reply.content == ""  # reasoning is not content
    (call,) = out.reply.tool_calls
    assert (call.name, call.id) == ("get_weather", "call_DdmO9pD3xa9XTPNJ32zg2hcA")
    assert orjson.loads(call.arguments) == {"location": "Paris, France"}
    assert out.reply.finish_reason == "tool_calls" and out.ttft is not None
