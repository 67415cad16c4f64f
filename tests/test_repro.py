"""`forensics repro` against the stand-in server (tests/model_server.py) over real HTTP on
127.0.0.1: the planted faults must come back as exactly those verdicts, and the results
must ingest, join the server's logs and compare."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson
import pytest

import forensics
from forensics.analyses.compare import compare
from forensics.analyses.correlate import correlate
from forensics.repro import repro

from .model_server import CORRUPTIONS, FAILURES, VERDICT, ModelServer, running

THRESHOLD = 4


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _results(path: Path) -> dict[str, dict]:
    return {r["rid"]: r for r in _lines(path) if "rid" in r}


def _by_run(rows: list[dict]) -> dict[str, dict[tuple, dict]]:
    """Result rows by run (their header) and (session, round, step)."""
    out: dict[str, dict[tuple, dict]] = {}
    run = None
    for r in rows:
        run = r.get("forensics_run", run)
        if "rid" in r:
            out.setdefault(run, {})[(r["session"], r["round"], r["step"])] = r
    return out


def _expected(kind: str | None, golden: bool) -> str:
    if kind is None or (kind == "diverged" and not golden):
        return "ok"  # without the solo reply, a well-formed different reply is invisible
    return VERDICT[kind]


def _check_exact(server: ModelServer, results: dict[str, dict], golden: bool) -> None:
    assert set(server.planted) <= set(results)
    wrong = [
        (rid, server.planted.get(rid), r["status"], r["reason"])
        for rid, r in results.items()
        if r["status"] != _expected(server.planted.get(rid), golden)
    ]
    assert wrong == []
    for r in results.values():  # corrupted means the status says so, and only then
        assert r["corrupted"] == (r["status"] == "corrupted")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_planted_verdicts_come_back_exactly(tmp_path: Path, stream: bool) -> None:
    server = ModelServer(threshold=THRESHOLD, log_dir=tmp_path / "logs")
    out = tmp_path / "results.jsonl"
    with running(server) as url:
        res = repro(url, sessions=[2, 16], rounds=5, out=out, timeout=0.5, stream=stream)
    assert not res.interrupted
    # every kind was planted (a fixed cycle over the requests at or above the threshold)
    assert set(server.planted.values()) == set(CORRUPTIONS) | set(FAILURES)
    results = _results(out)
    _check_exact(server, results, golden=False)
    # below the threshold nothing is planted, and nothing is found
    low = [r for r in _lines(out) if r.get("rid") and r["concurrency"] <= 2]
    assert low and all(r["status"] == "ok" for r in low if r["rid"] not in server.planted)
    # failures are counted apart from corruption, with their reason
    by_status = Counter(r["status"] for r in results.values())
    planted = Counter(_expected(k, False) for k in server.planted.values())
    for status in ("http_error", "timeout", "truncated", "corrupted"):
        assert by_status[status] == planted[status] > 0
    reason = {"broken_json": "tool_json", "schema": "tool_json", "markup": "markup_leak",
              "cross_talk": "cross_talk"}  # fmt: skip
    for r in results.values():
        if r["status"] == "corrupted":
            assert reason[server.planted[r["rid"]]] in r["reason"].split(",")
            assert r["details"]
    # cross-talk exactly where planted (another session's marker, named), nowhere else
    crossed = {rid for rid, r in results.items() if "cross_talk" in (r["reason"] or "")}
    assert crossed == {rid for rid, k in server.planted.items() if k == "cross_talk"} != set()
    for rid in crossed:
        assert "'s marker at offset" in results[rid]["details"]["cross_talk"]
    # the run's own counts say the same
    stats = {s.run: s for s in res.runs}
    assert set(stats) == {"repro-s2", "repro-s16"}
    assert sum(s.corrupted for s in stats.values()) == by_status["corrupted"]
    assert sum(s.failed for s in stats.values()) == by_status["http_error"] + by_status["timeout"]


def test_golden_replay_finds_divergence(tmp_path: Path) -> None:
    server = ModelServer(threshold=THRESHOLD, keep_bodies=True)
    out = tmp_path / "results.jsonl"
    with running(server) as url:
        res = repro(url, sessions=12, rounds=4, out=out, timeout=0.5, golden=True)
    names = [s.run for s in res.runs]
    assert names == ["repro-solo", "repro"]
    rows = _lines(out)
    heads = [r for r in rows if "forensics_run" in r]
    assert heads[0]["solo"] is True and heads[0]["temperature"] == 0.0
    runs = _by_run(rows)
    solo, loaded = runs["repro-solo"], runs["repro"]
    assert "diverged" in server.planted.values()
    _check_exact(server, {r["rid"]: r for r in loaded.values()}, golden=True)
    # the solo pass ran one request at a time, below the threshold: nothing planted there
    assert all(r["rid"] not in server.planted for r in solo.values())
    # under load every request is its solo twin, byte for byte (the session follows the
    # solo replies, whatever it got back)
    assert server.bodies is not None
    assert loaded.keys() == solo.keys()
    same = [server.bodies[loaded[k]["rid"]] == server.bodies[solo[k]["rid"]] for k in loaded]
    assert all(same)
    for r in loaded.values():
        if server.planted.get(r["rid"]) == "diverged":
            assert r["reason"].startswith("diverged")
            assert "first difference at offset" in r["details"]["diverged"]


def test_results_ingest_join_the_logs_and_compare(tmp_path: Path) -> None:
    server = ModelServer(threshold=THRESHOLD, log_dir=tmp_path / "logs")
    out = tmp_path / "results.jsonl"
    with running(server) as url:
        repro(url, sessions=[2, 16], rounds=5, out=out, timeout=0.5, tags={"overlap": "1"})
    db = tmp_path / "f.duckdb"
    logs = tmp_path / "logs"
    forensics.ingest([str(logs / "prefill.log"), str(logs / "decode.log"), str(out)], db,
                     run="journals")  # fmt: skip
    results = _results(out)
    corrupted = sum(r["status"] == "corrupted" for r in results.values())
    failed = sum(r["status"] in ("http_error", "timeout") for r in results.values())
    # the sweep is two runs, named by --run (it wins over the headers' repro-s2, repro-s16),
    # with the header's tags and ingest's
    cmp = compare(db)
    rates = {r.run: r for r in cmp.rates}
    assert set(rates) == {"journals-s2", "journals-s16"}
    s16 = rates["journals-s16"]
    assert s16.tags["sessions"] == "16" and s16.tags["overlap"] == "1"
    assert s16.tags["interrupted"] == "false"
    assert sum(r.corrupted for r in rates.values()) == corrupted
    assert sum(r.failed for r in rates.values()) == failed
    assert sum(r.requests for r in rates.values()) == len(results) - failed
    assert cmp.without_results == ["journals"]
    # each result finds its room through the server's Receive: lines and checksums,
    # though the journals are another run: every corrupted reply had a bad room, and the
    # only other bad rooms are the divergent replies no validator can see without --golden
    cor = correlate(db)
    room = next(a for a in cor.associations if a.name == "bad_room")
    bad_rooms = sum(k in CORRUPTIONS for k in server.planted.values())
    assert room.excluded == 0
    assert room.table.exposed_cases == corrupted
    assert room.table.exposed_total == bad_rooms > corrupted
    assert room.table.control_cases == 0
    assert room.table.significant
    assert cor.failed == failed


def test_interrupt_keeps_every_finished_result(tmp_path: Path) -> None:
    server = ModelServer()
    out = tmp_path / "results.jsonl"
    read, write = os.pipe()
    with running(server) as url:
        proc = subprocess.Popen(
            [sys.executable, "-m", "forensics", "repro", url, "--sessions", "8", "--rounds",
             "100000", "--out", str(out)],
            env={**os.environ, "FORENSICS_PROGRESS_FD": str(write)}, pass_fds=(write,),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        os.close(write)
        with os.fdopen(read, "rb") as progress:
            for _ in range(50):  # 50 results written, then Ctrl-C
                assert progress.readline() == b"result\n"
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr.decode()
    assert "interrupted: every finished request is in" in stdout.decode()
    rows = _lines(out)  # every line whole
    assert "forensics_run" in rows[0]
    assert rows[-1]["forensics_run_end"] == "repro" and rows[-1]["interrupted"] is True
    kept = [r for r in rows if "rid" in r]
    assert len(kept) >= 50 and rows[-1]["requests"] == len(kept)
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(out)], db)
    assert compare(db).rates[0].tags["interrupted"] == "true"


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    taken = tmp_path / "taken.jsonl"
    taken.write_text("{}\n")
    bad_toml = tmp_path / "s.toml"
    bad_toml.write_text(
        'name = "x"\nturns = ["hi"]\n[[tools]]\nname = "t"\nparameters = { type = 3 }\n'
    )
    cases = [
        (["http://127.0.0.1:9", "--out", str(taken)], "exists"),
        (["http://127.0.0.1:9", "--sessions", "10,x", "--out", str(tmp_path / "a")], "--sessions"),
        (["ftp://x", "--out", str(tmp_path / "b")], "not an http(s) URL"),
        (["http://127.0.0.1:9", "--scenario", str(bad_toml), "--out", str(tmp_path / "c")],
         "parameters are not a JSON Schema"),
        # nothing listens on port 9: the model cannot be listed
        (["http://127.0.0.1:9", "--out", str(tmp_path / "d"), "--timeout", "5"], "pass --model"),
    ]  # fmt: skip
    for args, needle in cases:
        proc = subprocess.run([sys.executable, "-m", "forensics", "repro", *args],
                              capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert taken.read_text() == "{}\n"  # not overwritten
    assert not (tmp_path / "d").exists()  # nothing written for a run that never started


def test_cli_json_summary_and_the_live_table(tmp_path: Path) -> None:
    from rich.console import Console

    from forensics import terminal

    out = tmp_path / "results.jsonl"
    seen = []
    with running(ModelServer()) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "forensics", "repro", url, "--sessions", "2,3", "--rounds",
             "2", "--out", str(out), "--json", "--run", "lvl", "--stream"],
            capture_output=True, text=True,
        )  # fmt: skip
        # an OpenAI client's base URL (…/v1/) works as well
        res = repro(f"{url}/v1/", sessions=4, rounds=2, out=tmp_path / "b.jsonl",
                    progress=seen.append)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert [r["run"] for r in doc["runs"]] == ["lvl-s2", "lvl-s3"]
    assert all(r["statuses"] == {"ok": r["requests"]} and r["rate"] == 0 for r in doc["runs"])
    assert _lines(out)[0]["stream"] is True
    # progress is reported while the run goes and once at its end, with the final counts
    assert seen and seen[-1] is res.runs[0] and seen[-1].rounds_done == 8
    assert res.runs[0].statuses == {"ok": res.runs[0].requests}
    con = Console(record=True, width=200, force_terminal=True)
    with terminal.ReproLive(con) as live:
        live.update(res.runs[0])
    terminal.repro(con, res)
    text = con.export_text()
    assert "repro" in text and "8/8" in text and "0.0 % (0.0 %–" in text


@pytest.mark.parametrize("retries", [0, 1])
def test_retries_are_off_by_default_and_each_attempt_is_a_result(
    tmp_path: Path, retries: int
) -> None:
    # the first request to arrive fails with a 500, every other one is answered
    server = ModelServer(threshold=1, faults={"http_500": 1})
    out = tmp_path / "results.jsonl"
    with running(server) as url:
        repro(url, sessions=1, rounds=2, out=out, retries=retries)
    rows = _lines(out)
    assert rows[0]["retries"] == retries
    first, second = rows[1], rows[2]
    assert (first["status"], first["attempt"], first["round"]) == ("http_error", 0, 0)
    if retries:  # the same request again, under a new rid, and the round goes on
        assert (second["round"], second["step"], second["attempt"]) == (0, 0, 1)
        assert second["status"] == "ok" and second["rid"] != first["rid"]
    else:  # nothing to continue the round from: the next round
        assert (second["round"], second["step"], second["attempt"]) == (1, 0, 0)
