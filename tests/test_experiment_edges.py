"""The experiment loop at its edges (issue 51): plans checked whole, the server stopped on
every exit, a block finished only when it is, and every exit 0/1/125, 128 or 130 with one
line and no secret."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

import forensics.experiment as ex
from forensics.experiment.blocks import finished, ingest_block
from forensics.experiment.plan import Arm, load_plan
from forensics.experiment.server import PIDS, Server, Untestable, group_alive, stop_left

from .helpers import cli
from .test_experiment import ROOT, _plan, _port, _write
from .test_wait import HOLD

TWO = ('[[arms]]\nname = "a"\nurl = "http://127.0.0.1:1"\n'
       '[[arms]]\nname = "b"\nurl = "http://127.0.0.1:2"\n')  # fmt: skip


def _one_line_128(proc: subprocess.CompletedProcess, says: str) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == 128, (proc.returncode, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert says in err, err
    assert "unexpected" not in err, err


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("min_effect = inf\n" + TWO, "min_effect must be finite and in (1,1000]"),
        ("max_diff = nan\n" + TWO, "max_diff must be finite"),
        ("max_diff = -1.0\n" + TWO, "max_diff must be finite and in (0,1)"),
        ("max_minutes = nan\n" + TWO, "max_minutes must be finite"),
        ("seed = 18446744073709551616\n" + TWO, "seed must be finite and in [0,"),
        ("max_requests = 10000000000\n" + TWO, "max_requests must be finite and in"),
        (TWO + '[start]\ncommand = "no-such-server-xyz {flags}"\n', "'no-such-server-xyz' is "
         "not a program found on PATH"),
        (TWO + "[start]\ncommand = \"python -c 'print(1)\"\n", "no closing quotation"),
        (TWO + '[start]\ncommand = "python {flags}"\ntimeout_s = nan\n', "start.timeout_s"),
        ('scenario = "/nonexistent/s.toml"\n' + TWO, "scenario:"),
    ],
)  # fmt: skip
def test_a_plan_out_of_range_or_not_runnable_is_128_and_one_line(
    tmp_path: Path, body: str, says: str
) -> None:
    plan = _write(tmp_path, body)
    _one_line_128(cli("experiment", "ab", str(plan), "--dry-run"), says)


def test_a_plan_that_is_no_plan_and_an_out_that_is_no_folder(tmp_path: Path) -> None:
    _one_line_128(cli("experiment", "ab", "/dev/zero"), "larger than 1 MB")
    _one_line_128(cli("experiment", "ab", str(tmp_path)), "plan")  # a folder
    plan = _write(tmp_path, "good_rate = 0.01\nbad_rate = 0.2\n")
    afile = _write(tmp_path, "x", "a-file")
    _one_line_128(cli("experiment", "check", str(plan), "--out", str(afile)), "not a folder")
    _one_line_128(cli("experiment", "check", str(plan), "--out", "/proc/self/x"), "--out /proc")


def test_an_error_line_never_carries_a_secret(tmp_path: Path) -> None:
    plan = _write(tmp_path, 'url = ["http://alice:hunter2@router:30000"]\n')
    proc = cli("experiment", "check", str(plan), "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 128 and "url must be str" in doc["error"]
    assert "hunter2" not in doc["error"] and "hunter2" not in proc.stderr.decode()


def test_a_huge_budget_dry_run_is_a_summary_at_once(tmp_path: Path) -> None:
    plan = _write(tmp_path, "max_requests = 1000000000\nsessions = 8\nrounds = 2\n" + TWO)
    proc = cli("experiment", "ab", str(plan), "--dry-run", "--json", timeout=60)
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 0 and len(doc["schedule"]) == 4
    # a round is a user turn and up to three tool calls (the built-in scenario)
    assert doc["schedule"][0]["requests"] == [16, 64]
    assert doc["schedule_summary"]["blocks"] == [1000000000 // 64, 1000000000 // 16]
    text = cli("experiment", "ab", str(plan), "--dry-run", timeout=60).stdout.decode()
    assert "16–64" in text and "15,625,000–62,500,000 blocks" in " ".join(text.split())


def test_a_zero_arm_has_an_infinite_ratio_with_its_interval() -> None:
    from forensics.experiment.sequential import AbTest

    test = AbTest((), 0.05, 2.0)
    for _ in range(2):
        test.add_pair(0, 32, 8, 32)
    st = test.state
    assert st is not None and st.rr == float("inf") and test.lo > 0
    res = ex.ExperimentResult("ab")
    ex._read(test, res, None)
    assert res.as_dict()["rr_text"] == "∞" and res.ci[0] == test.lo and res.ci[1] is None
    from rich.console import Console

    from forensics import terminal

    con = Console(record=True, width=200)
    terminal.experiment(con, res)
    assert "RR ∞, always-valid 0.63–∞" in con.export_text()


# --- against the stand-in server ------------------------------------------------------

SLOW = "good_rate = 0.01\nbad_rate = 0.05\nmax_requests = 2000\n"


def _start(plan: Path, out: Path, db: Path | None = None) -> subprocess.Popen:
    args = [sys.executable, "-m", "forensics", "experiment", "check", str(plan), "--out",
            str(out), "--json"] + (["--db", str(db)] if db else [])  # fmt: skip
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)


def _until(ready, proc: subprocess.Popen, what: str, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.02)  # polling what the command writes: the event, not a guess


def _gone(pgid: int, limit: float = 60) -> bool:
    deadline = time.monotonic() + limit
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)  # another process's exit: no event here to wait on
    return not group_alive(pgid)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_the_experiment_stops_the_server(tmp_path: Path, sig: int) -> None:
    """kill -9: the watchdog stops the server's group; SIGTERM: as Ctrl-C, exit 130 with
    one line and the blocks kept. Either way --resume then runs on the same port."""
    plan = _plan(tmp_path, SLOW, extra="--base-rate 0.01")
    out = tmp_path / "o"
    proc = _start(plan, out)
    _until(lambda: (out / "check" / "b0.jsonl").exists(), proc, "the first block")
    pgid = orjson.loads((out / PIDS).read_bytes())[0]["pgid"]
    assert group_alive(pgid)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert _gone(pgid), "the server outlived the experiment"
    if sig == signal.SIGTERM:
        assert proc.returncode == 130 and "interrupted" in orjson.loads(stdout)["error"]
        assert not stderr.strip() or len(stderr.decode().strip().splitlines()) == 1
    again = ex.check(plan, None, out, resume=True)
    assert again.decision in ("good", "undecided"), again.as_dict()


def test_resume_reads_a_results_file_cut_mid_line(tmp_path: Path) -> None:
    """A block's results cut mid-line: --resume reads them up to the last whole line and
    says so — an ingested block counts as it was, one not ingested runs again — and no
    decoder error reaches the user."""
    rates = "good_rate = 0.04\nbad_rate = 0.06\nmax_requests = 96\n"
    plan = _plan(tmp_path, rates, extra="--base-rate 0.05")
    out, db = tmp_path / "o", tmp_path / "db.duckdb"
    first = ex.check(plan, db, out)
    assert len(first.blocks) >= 2
    held = out / "check" / "b0.jsonl"  # ingested: its run is in the incident
    data = held.read_bytes()
    held.write_bytes(data[: len(data) // 2])
    again = ex.check(plan, db, out, resume=True)
    assert again.blocks[0].requests < first.blocks[0].requests
    assert any(n.startswith("block 0 (check): 1 line of b0.jsonl not read") for n in again.notes)
    assert again.as_dict()["notes"] == again.notes
    loose = tmp_path / "o2"  # no incident: the cut block runs again
    ex.check(plan, None, loose)
    cut = loose / "check" / "b1.jsonl"
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) - 40])
    rerun = ex.check(plan, None, loose, resume=True)
    assert any(n.startswith("block 1 (check) did not finish (1 line of it not read")
               for n in rerun.notes), rerun.notes  # fmt: skip
    assert finished(cut) and len(rerun.blocks) >= 2


def test_ctrl_c_mid_block_leaves_it_unfinished_and_resume_ingests_it(tmp_path: Path) -> None:
    """A cut block ends with an interrupted end line: not finished, so --resume runs it
    again and ingests it; a cut block whose run is already ingested counts as done."""
    plan = _plan(tmp_path, SLOW, extra="--base-rate 0.01")
    out, db = tmp_path / "o", tmp_path / "db.duckdb"
    proc = _start(plan, out, db)
    _until(lambda: (out / "check" / "b1.jsonl").exists(), proc, "the second block")
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    cut = out / "check" / "b1.jsonl"
    assert b'"interrupted":true' in cut.read_bytes() and not finished(cut)
    res = ex.check(plan, db, out, resume=True)
    assert res.decision == "good", res.as_dict()
    from forensics.analyses.runs import list_runs

    held = {r["run"]: r for r in list_runs(db)}
    assert set(res.runs) <= set(held) and all(finished(out / "check" / f"b{k}.jsonl")
                                              for k in range(len(res.blocks)))  # fmt: skip
    assert held[res.runs[1]]["judged"] == res.blocks[1].requests  # the whole block
    # the last block's end line lost after its ingest: done, not run again for ever
    last = out / "check" / f"b{len(res.blocks) - 1}.jsonl"
    last.write_bytes(b"".join(x for x in last.read_bytes().splitlines(keepends=True)
                              if b"forensics_run_end" not in x))  # fmt: skip
    blocks = ex.previous_blocks(out, res.name, db)
    assert [b.run for b in blocks] == res.runs


def test_a_block_ingest_waits_for_another_writer(tmp_path: Path) -> None:
    results = tmp_path / "b0.jsonl"
    results.write_bytes(
        b'{"forensics_run": "x", "tags": {}}\n'
        b'{"rid": "r1", "session": "s0", "status": "ok", "ts_us": 1}\n'
        b'{"forensics_run_end": "x", "requests": 1, "interrupted": false}\n'
    )
    db = tmp_path / "db.duckdb"
    ingest_block(results, "first", db)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        began, done = threading.Event(), []
        other = tmp_path / "b1.jsonl"
        other.write_bytes(results.read_bytes().replace(b"r1", b"r2"))
        worker = threading.Thread(target=lambda: done.append(
            ingest_block(other, "second", db, waiting=began.set) or True))  # fmt: skip
        worker.start()
        assert began.wait(120)  # it met the lock and waits, not fails
        holder.stdin.close()
        worker.join(120)
        assert done == [True]
    finally:
        holder.kill()
        holder.wait()
    from forensics.analyses.runs import list_runs

    assert {"first", "second"} <= {r["run"] for r in list_runs(db)}


def test_a_leader_that_exits_leaves_no_process_of_its_group(tmp_path: Path) -> None:
    """The server's leader starts a child and exits: down() stops the child too."""
    child_pid = tmp_path / "child.pid"
    leader = tmp_path / "leader.py"
    leader.write_text("import subprocess, sys, pathlib\n"
                      "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                      f"pathlib.Path({str(child_pid)!r}).write_text(str(p.pid))\n"
                      "sys.exit(3)\n")  # fmt: skip
    server = Server({"command": f"{sys.executable} {leader}", "timeout_s": 60},
                    f"http://127.0.0.1:{_port()}", tmp_path)  # fmt: skip
    with pytest.raises(Untestable, match="exited with code 3"):
        server.up(Arm("a"), tmp_path / "s.log")
    pid = int(child_pid.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (tmp_path / PIDS).exists()


def test_resume_stops_the_server_a_killed_run_left(tmp_path: Path) -> None:
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                            start_new_session=True)  # fmt: skip
    reused = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                              start_new_session=True)  # fmt: skip
    try:
        from forensics.experiment.server import _started

        (tmp_path / PIDS).write_bytes(orjson.dumps([
            {"pgid": left.pid, "start": _started(left.pid)},
            {"pgid": reused.pid, "start": (_started(reused.pid) or 0) - 1},  # another's now
        ]))  # fmt: skip
        assert stop_left(tmp_path) == 1
        assert left.wait(30) == -signal.SIGTERM
        assert reused.poll() is None and not (tmp_path / PIDS).exists()
    finally:
        for p in (left, reused):
            p.kill()
            p.wait()


def test_a_health_url_with_user_info_is_healthy_and_never_said(tmp_path: Path) -> None:
    port = _port()
    command = f"{sys.executable} -m tests.model_server --port {port} --base-rate 0.01"
    server = Server({"command": command, "timeout_s": 60},
                    f"http://alice:hunter2@127.0.0.1:{port}", tmp_path)  # fmt: skip
    try:
        assert server.up(Arm("a"), tmp_path / "s.log")
    finally:
        server.down()
    wrong = Server({"command": command, "health": "/nope", "timeout_s": 2},
                   f"http://alice:hunter2@127.0.0.1:{port}", tmp_path)  # fmt: skip
    with pytest.raises(Untestable) as err:
        wrong.up(Arm("a"), tmp_path / "w.log")
    assert "hunter2" not in str(err.value) and "127.0.0.1" in str(err.value)


# --- what the tool writes runs as written ------------------------------------------------

STOCK_HEADER = {"url": "http://ops:hunter2@router:30000", "sessions": "64", "rounds": "0"}


@pytest.mark.parametrize(
    "cause",
    [
        c.id
        for c in __import__(
            "forensics.analyses.suspects.causes", fromlist=["known_causes"]
        ).known_causes()
    ],
)
def test_each_known_causes_plan_passes_a_dry_run(tmp_path: Path, cause: str) -> None:
    """The plan written for a stock incident (its header: rounds 0, the router's url)
    loads and dry-runs: rounds never 0, url what [start] serves, blocks of about 100."""
    from forensics.analyses.suspects.causes import for_run, known_causes, plan_toml

    found = next(c for c in known_causes() if c.id == cause)
    experiment = for_run(found.experiment.as_dict(), STOCK_HEADER)
    assert "--rounds 0" not in experiment["repro"] and "--rounds 8" in experiment["repro"]
    path = _write(tmp_path, plan_toml(cause, experiment, STOCK_HEADER), "next.toml")
    assert "hunter2" not in path.read_text()
    plan = load_plan(path, "ab")
    assert plan.url == "http://127.0.0.1:30000" and "--port 30000" in plan.start["command"]
    assert int(plan.sessions) == 64 and int(plan.rounds) == 1
    res = ex.ab(path, dry_run=True)
    assert res.exit_code == 0 and res.summary["requests_per_block"][0] <= 100 * 2
