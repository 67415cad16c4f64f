"""What the reproducer gathers of its own (issue 21) against the stand-in server: the probe
that drops refused fields once, SGLang's meta_info per result, the rid as X-Request-Id,
the server's arguments in the run header and in `compare`, cross-talk between sessions,
golden retries, and a run that got no reply failing in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import forensics
from forensics.analyses.compare import compare
from forensics.repro import repro
from forensics.repro.crosstalk import GRAM, STRIDE, CrossTalk, marker
from forensics.repro.scenario import filler

from .model_server import ModelServer, running


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _rows(path: Path) -> list[dict]:
    return [r for r in _lines(path) if "rid" in r]


def test_a_refused_field_is_dropped_once_for_the_whole_run(tmp_path: Path) -> None:
    server = ModelServer(refuse=frozenset({"return_meta_info", "seed"}), keep_bodies=True)
    out = tmp_path / "r.jsonl"
    with running(server) as url:
        repro(url, sessions=3, rounds=2, out=out)
    head = _lines(out)[0]
    assert head["dropped_fields"] == ["return_meta_info", "seed"]
    assert head["meta_info"] == "off: refused"
    # the probe alone was refused, once for each field (its 422 names one at a time):
    # no loaded request was refused, or re-sent, for them
    assert server.refused == {"seed": 1, "return_meta_info": 1}
    assert server.probes == 1  # answered: the third
    rows = _rows(out)
    assert rows and all(r["status"] == "ok" and "meta_info" not in r for r in rows)
    assert all(r["attempt"] == 0 for r in rows)


def test_meta_info_is_kept_and_the_rid_is_the_request_id(tmp_path: Path) -> None:
    server = ModelServer()
    out, streamed = tmp_path / "r.jsonl", tmp_path / "s.jsonl"
    with running(server) as url:
        repro(url, sessions=2, rounds=2, out=out)
        repro(url, sessions=2, rounds=2, out=streamed, stream=True)
    head, rows = _lines(out)[0], _rows(out)
    assert head["meta_info"] == "on" and head["dropped_fields"] == []
    assert head["probe"] == {"http_status": 200, "meta_info": True}
    for r in rows:
        meta = r["meta_info"]
        assert meta["id"] == r["rid"] and meta["num_retractions"] == 0
        assert meta["finish_reason"] == {"type": r["finish_reason"]}
        assert "output_token_logprobs" not in meta  # what grows with the reply stays out
        assert server.request_ids[r["rid"]] == r["rid"]
    # SGLang returns meta_info only without streaming: a streamed run does not ask
    assert _lines(streamed)[0]["meta_info"] == "off: streamed"
    assert all("meta_info" not in r for r in _rows(streamed))
    assert all(server.request_ids[r["rid"]] == r["rid"] for r in _rows(streamed))
    # ingested, meta_info is in the result's extra
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(out)], db)
    with forensics.connect_read_only(db) as con:
        got = con.execute(
            "SELECT count(*) FROM results WHERE json_extract_string(extra, '$.meta_info.id') = rid"
        ).fetchone()
    assert got == (len(rows),)


def test_server_arguments_go_into_the_header_and_compare_shows_what_differs(
    tmp_path: Path,
) -> None:
    args = {"chunked_prefill_size": 8192, "port": 30001, "cuda_graph_bs": [1, 2],
            "disaggregation_mode": "decode"}  # fmt: skip
    a, b, pd = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "pd.jsonl"
    with running(ModelServer(server_args=args)) as url:
        repro(url, sessions=2, rounds=1, out=a, run="a")
    with running(ModelServer(server_args={**args, "chunked_prefill_size": 4096})) as url:
        repro(url, sessions=2, rounds=1, out=b, run="b")
    with running(ModelServer(server_args=args, pd=True)) as url:
        repro(url, sessions=2, rounds=1, out=pd, run="pd")
    head = _lines(a)[0]
    assert head["server_info_path"] == "/server_info"
    assert head["server_info"]["chunked_prefill_size"] == 8192
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(a), str(b), str(pd)], db)
    cmp = compare(db, ["a", "b"])
    shared, own = cmp.tag_split()
    # what differs is the argument changed; runtime state is no tag at all
    assert [{k: v for k, v in o.items() if k.startswith("server.")} for o in own] == [
        {"server.chunked_prefill_size": "8192"}, {"server.chunked_prefill_size": "4096"}]  # fmt: skip
    assert shared["server.cuda_graph_bs"] == "[1,2]" and shared["server.version"] == "0.5.6"
    assert not any("internal_states" in k for r in cmp.rates for k in r.tags)
    # a PD router's per-side lists: one tag per side, two decode servers' values joined
    pd_tags = next(r.tags for r in compare(db, ["pd"]).rates)
    assert pd_tags["server.prefill.chunked_prefill_size"] == "8192"
    assert pd_tags["server.decode.port"].count(" | ") == 1
    # a wide terminal: a process pytest starts inherits COLUMNS=80 from its C environment
    proc = subprocess.run([sys.executable, "-m", "forensics", "compare", "--db", str(db),
                           "a", "b"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "server.chunked_prefill_size=8192" in proc.stdout
    assert "server.disaggregation_mode" not in proc.stdout  # the same in both: counted only
    assert "arguments: the same in every run" in proc.stdout


def test_no_cross_talk_is_found_in_text_the_sessions_share(tmp_path: Path) -> None:
    # every reply quotes the system text all sessions share and the session's own context,
    # cut from the corpus the other contexts are cut from too
    out = tmp_path / "r.jsonl"
    with running(ModelServer(echo_shared=True)) as url:
        repro(url, sessions=8, rounds=2, out=out)
    rows = _rows(out)
    assert rows and all(r["status"] == "ok" for r in rows), [r["details"] for r in rows][:3]


def _prompts(*texts: str) -> CrossTalk:
    ct = CrossTalk()
    for s, text in enumerate(texts):
        ct.begin(s, 0, 100.0)
        ct.add(s, text)
    return ct


def test_cross_talk_finds_only_unique_text_of_a_session_near_in_time() -> None:
    a, b, c = (filler(f"x/{i}", 4000) for i in range(3))
    shared = a[1000:1300]
    ct = _prompts(a, b, c + shared)
    # a stretch of GRAM + STRIDE - 1 characters of session 0's own text, at any alignment
    for at in range(0, 40, 7):
        piece = a[2000 + at : 2000 + at + GRAM + STRIDE - 1]
        found = ct.check(f"So: {piece} done", 1, 101.0, 102.0)
        assert found is not None and found.startswith("session 0's text at offset")
    assert ct.check(f"So: {a[2000 : 2000 + GRAM - 1]}", 1, 101.0, 102.0) is None  # too short
    assert ct.check(f"So: {shared}", 1, 101.0, 102.0) is None  # held by sessions 0 and 2
    assert ct.check(f"So: {a[2000:2300]}", 0, 101.0, 102.0) is None  # its own
    # a session that ended more than 30 s before the request began is no suspect
    ct.end(0, 105.0)
    assert ct.check(a[2000:2300], 1, 130.0, 131.0) is not None
    assert ct.check(a[2000:2300], 1, 136.0, 137.0) is None
    # markers: another's is cross-talk, one's own is not
    assert ct.check(f"see {marker(0, 2)}", 1, 101.0, 102.0) == "session 2's marker at offset 4"
    assert ct.check(f"see {marker(0, 1)}", 1, 101.0, 102.0) is None


def test_golden_sends_a_failed_solo_request_again(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with running(ModelServer(fail_first=2)) as url:
        res = repro(url, sessions=1, rounds=1, out=out, golden=True)
    assert [h["retries"] for h in _lines(out) if "forensics_run" in h] == [2, 0]
    solo = [r for r in _rows(out) if r["rid"] in _solo_rids(out)]
    assert [(r["attempt"], r["status"]) for r in solo[:3]] == [
        (0, "http_error"), (1, "http_error"), (2, "ok")]  # fmt: skip
    loaded = res.runs[1]
    assert loaded.uncompared == 0 and loaded.statuses["ok"] == loaded.requests


def test_a_loaded_request_without_a_solo_reply_is_uncompared(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    with running(ModelServer(fail_first=3)) as url:
        res = repro(url, sessions=1, rounds=2, out=out, golden=True)
    solo, loaded = res.runs
    assert solo.failed == 3
    assert loaded.uncompared == 1 and loaded.judged == loaded.requests - 1
    first = next(r for r in _rows(out) if r["rid"] not in _solo_rids(out))
    assert (first["round"], first["step"], first["status"]) == (0, 0, "uncompared")
    assert first["corrupted"] is False and "solo twin" in first["details"]["uncompared"]
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(out)], db)
    rate = next(r for r in compare(db).rates if r.run == "repro")
    assert rate.requests == loaded.judged  # counted apart, not in the rate


def _solo_rids(path: Path) -> set[str]:
    rids, run = set(), None
    for r in _lines(path):
        run = r.get("forensics_run", run)
        if "rid" in r and run and run.endswith("-solo"):
            rids.add(r["rid"])
    return rids


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        (None, "no reply to the probe request"),  # nothing listens
        (ModelServer(threshold=0, faults={"http_500": 100}), "no request got a reply"),
        (ModelServer(model="other"), "refused the probe request: HTTP 404"),
    ],
    ids=["down", "every-500", "wrong-model"],
)
def test_a_run_without_a_reply_fails_in_one_line(
    tmp_path: Path, server: ModelServer | None, needle: str
) -> None:
    out = tmp_path / "r.jsonl"
    args = ["--sessions", "2", "--rounds", "1", "--model", "test-model", "--out", str(out)]
    if server is None:
        url = "http://127.0.0.1:9"
        proc = subprocess.run([sys.executable, "-m", "forensics", "repro", url, *args],
                              capture_output=True, text=True)  # fmt: skip
    else:
        with running(server) as url:
            proc = subprocess.run([sys.executable, "-m", "forensics", "repro", url, *args],
                                  capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0
    assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_every_stretch_of_a_sessions_prompt_text_is_its_own_at_80_sessions() -> None:
    """Contexts and tool results are each session's own: no 64-character stretch of one
    (at any offset) appears in another's, at 80 sessions (slices of one shared corpus
    overlapped: some sessions had no stretch of their own at 32)."""
    from forensics.repro.scenario import load_scenario
    from forensics.repro.sessions import Plan, system_message, tool_result

    plan = Plan(load_scenario(None), "m", 4, 0, False, 0.0)
    owner: dict[int, int] = {}
    shared = 0
    for s in range(80):
        ctx = system_message(plan, s)["content"].split("Repository:\n", 1)[1]
        texts = [ctx, *(tool_result(plan, s, "read_file", '{"path": "a.py"}') for _ in range(1))]
        grams = {hash(t[i : i + GRAM]) for t in texts for i in range(len(t) - GRAM + 1)}
        for h in grams:
            if owner.setdefault(h, s) != s:
                shared += 1
    assert shared == 0
    a = tool_result(plan, 1, "read_file", '{"path": "a.py"}')
    assert a == tool_result(plan, 1, "read_file", '{"path": "a.py"}')  # a pure function
    assert a != tool_result(plan, 2, "read_file", '{"path": "a.py"}')  # … of its session


def test_planted_leaks_of_another_sessions_text_are_found(tmp_path: Path) -> None:
    """At 80 sessions the stand-in quotes 80-400 characters of another in-flight
    session's context in its replies: at least 99 % are found as cross-talk, and no
    reply without a leak is."""
    server = ModelServer(leaks=True, latency=0.01)
    out = tmp_path / "r.jsonl"
    with running(server) as url:
        repro(url, sessions=80, rounds=5, out=out)
    rows = {r["rid"]: r for r in _rows(out)}
    leaked = {rid for rid, k in server.planted.items() if k == "leak" and rid in rows}
    found = {rid for rid, r in rows.items() if "cross_talk" in (r["reason"] or "")}
    assert len(leaked) >= 300
    assert len(found & leaked) >= 0.99 * len(leaked)
    assert not found - leaked
