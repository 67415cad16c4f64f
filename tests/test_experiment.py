"""`forensics experiment`: its sequential tests by simulation (the command's own decision
objects, vectorised over experiments, seeded), ddmin on known answers, the plan's keys,
and end to end against the stand-in server started by `[start]` with a flag rule."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

import forensics.experiment as ex
from forensics import compare
from forensics.analyses.runs import list_runs
from forensics.errors import ForensicsError
from forensics.experiment.ddmin import BAD, GOOD, UNDECIDED, ddmin
from forensics.experiment.plan import keys_markdown, load_plan
from forensics.experiment.sequential import (
    CONTINUE,
    DIFFERS,
    EQUIVALENT,
    AbTest,
    CheckTest,
)

from .helpers import cli

ROOT = Path(__file__).resolve().parent.parent
ALPHA = 0.05
E = 2000  # simulated experiments


def _mcse_bound(alpha: float = ALPHA, n: int = E) -> float:
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / n)


def _block(rng, p: float, sessions: int, rounds: int, icc: float, n: int = E):
    """Corrupted sessions and requests of one block per experiment: a per-block Beta
    rate (intra-class correlation `icc`), and a session stays corrupted once hit."""
    if icc > 0:
        pb = rng.beta(p * (1 - icc) / icc, (1 - p) * (1 - icc) / icc, size=n)
    else:
        pb = np.full(n, p)
    hit = rng.random((n, sessions, rounds)) < pb[:, None, None]
    first = np.where(hit.any(-1), hit.argmax(-1), rounds)
    return (first < rounds).sum(-1), (rounds - first).sum(-1)


def _ab(pa: float, pb: float, *, sessions: int = 32, rounds: int = 4, budget: int = 6000,
        icc: float = 0.0, seed: int = 0, min_effect: float = 2.0, direction: int = 0):  # fmt: skip
    """Each experiment's decision and the judged requests an arm it took."""
    rng = np.random.default_rng(seed)
    test = AbTest((E,), ALPHA, min_effect, None, direction)
    decision, used = np.full(E, CONTINUE), np.zeros(E)
    per = sessions * rounds
    k = 0
    while (decision == CONTINUE).any() and 2 * per * (k + 1) <= budget:
        xa, _ = _block(rng, pa, sessions, rounds, icc)
        xb, _ = _block(rng, pb, sessions, rounds, icc)
        code = test.add_pair(xa, np.full(E, sessions), xb, np.full(E, sessions))
        new = (decision == CONTINUE) & (code != CONTINUE)
        decision[new], used[new] = code[new], per * (k + 1)
        k += 1
    used[decision == CONTINUE] = per * k
    return decision, used


@pytest.mark.parametrize(("rate", "icc"), [(0.01, 0.02), (0.05, 0.1)])
def test_under_no_difference_ab_says_differs_within_alpha(rate: float, icc: float) -> None:
    """Block-correlated nulls (a per-block Beta rate, sessions that stay corrupted),
    watched pair by pair up to the budget."""
    decision, _ = _ab(rate, rate, icc=icc, seed=1)
    assert np.mean(decision == DIFFERS) <= _mcse_bound()


@pytest.mark.slow
@pytest.mark.parametrize(("rate", "icc"), [(0.005, 0.1), (0.01, 0.1), (0.2, 0.1), (0.05, 0.02)])
def test_under_no_difference_every_base_rate(rate: float, icc: float) -> None:
    decision, _ = _ab(rate, rate, icc=icc, seed=2)
    assert np.mean(decision == DIFFERS) <= _mcse_bound()


@pytest.mark.parametrize("rr", [2.0, 0.5])
def test_at_the_margin_equivalent_is_rare(rr: float) -> None:
    """True RR at min_effect (or its inverse): `equivalent` within alpha."""
    decision, _ = _ab(0.05, 0.05 * rr, seed=3)
    assert np.mean(decision == EQUIVALENT) <= _mcse_bound()


def test_a_large_difference_is_decided_in_a_few_hundred_requests() -> None:
    """1 % vs 25 %: blocks of 8 sessions × 2 rounds — median ≤ 200 and 95th percentile
    ≤ 500 judged requests an arm; blocks of 32 × 4 decide after two pairs at most mostly."""
    decision, used = _ab(0.01, 0.25, sessions=8, rounds=2, budget=1500, seed=4)
    assert np.mean(decision == DIFFERS) >= 0.99
    assert np.median(used) <= 200 and np.percentile(used, 95) <= 500
    decision, used = _ab(0.01, 0.25, seed=5)
    assert np.mean(decision == DIFFERS) >= 0.99 and np.percentile(used, 95) <= 500


def test_equal_rates_end_equivalent_at_five_percent_and_undecided_at_one() -> None:
    decision, used = _ab(0.05, 0.05, seed=6)
    assert np.mean(decision == EQUIVALENT) >= 0.9 and np.max(used) <= 3000
    decision, _ = _ab(0.01, 0.01, seed=7)
    assert np.mean(decision == CONTINUE) >= 0.9  # the honest answer: undecided


def test_a_one_sided_test_is_faster_its_way_and_blind_the_other() -> None:
    """direction = higher: under no difference within alpha; a higher second arm found at
    least as often as two-sided; a lower one never called `differs`."""
    null, _ = _ab(0.05, 0.05, icc=0.05, seed=10, direction=1)
    assert np.mean(null == DIFFERS) <= _mcse_bound()
    one, _ = _ab(0.02, 0.04, seed=11, direction=1)
    two, _ = _ab(0.02, 0.04, seed=11)
    assert np.mean(one == DIFFERS) >= np.mean(two == DIFFERS)
    wrong, _ = _ab(0.08, 0.02, seed=12, direction=1)
    assert np.mean(wrong == DIFFERS) <= _mcse_bound()


def _check(rate: float, good: float = 0.02, bad: float = 0.15, alpha: float = ALPHA,
           rng=None, n: int = E, budget: int = 1500):  # fmt: skip
    rng = rng or np.random.default_rng(8)
    test = CheckTest((n,), alpha, good, bad)
    decision = np.full(n, CONTINUE)
    for _ in range(budget // 16):
        _, x = _block(rng, rate, 8, 2, 0.0, n)
        code = test.add_block(x, np.full(n, 16))
        decision = np.where(decision == CONTINUE, code, decision)
        if (decision != CONTINUE).all():
            break
    return decision


def test_check_is_wrong_at_most_alpha_at_either_rate() -> None:
    """Wald's SPRT at α = β: at the good rate "bad" within alpha, at the bad rate "good"
    within alpha (sessions that stay corrupted make requests correlated)."""
    assert np.mean(_check(0.02) == 1) <= _mcse_bound()
    assert np.mean(_check(0.15) == 2) <= _mcse_bound()
    assert np.mean(_check(0.01) == 2) >= 0.95 and np.mean(_check(0.25) == 1) >= 0.95


def test_ddmin_finds_a_planted_pair_and_confirms_it() -> None:
    flags = ["--a", "--x", "--b", "--y", "--c"]
    found = ddmin(flags, lambda s: BAD if {"--x", "--y"} <= set(s) else GOOD, 40)
    assert found.subset == ["--x", "--y"] and found.one_minimal
    assert found.tests[0] == (flags, BAD) and found.tests[1] == ([], GOOD)
    one = ddmin(flags, lambda s: BAD if "--b" in s else GOOD, 40)
    assert one.subset == ["--b"] and one.one_minimal


def test_ddmin_says_why_it_cannot_answer() -> None:
    flags = ["--a", "--b"]
    assert ddmin(flags, lambda s: GOOD, 10).why.startswith("the full set of flags is good")
    assert "without any of the flags is bad" in ddmin(flags, lambda s: BAD, 10).why
    assert ddmin(flags * 3, lambda s: UNDECIDED, 10).subset is None
    budget = ddmin([f"--f{i}" for i in range(8)], lambda s: BAD if "--f7" in s else GOOD, 3)
    assert budget.subset is None and "out of tests" in budget.why


def test_minimize_by_simulation_returns_the_planted_pair() -> None:
    """200 runs of ddmin over five flags, each test the command's own SPRT on simulated
    blocks (25 % with both planted flags on, else 1 %), at alpha / max_tests."""
    rng = np.random.default_rng(9)
    flags = ["--a", "--x", "--b", "--y", "--c"]
    hits = 0
    for _ in range(200):

        def test(subset: list[str]) -> str:
            rate = 0.25 if {"--x", "--y"} <= set(subset) else 0.01
            code = _check(rate, alpha=ALPHA / 24, rng=rng, n=1)[0]
            return {1: BAD, 2: GOOD}.get(int(code), UNDECIDED)

        hits += ddmin(flags, test, 24).subset == ["--x", "--y"]
    assert hits >= 190


# --- the plan ----------------------------------------------------------------------


def _write(tmp: Path, text: str, name: str = "plan.toml") -> Path:
    p = tmp / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("text", "verb", "says"),
    [
        ('sesions = 3\n[[arms]]\nname="a"\n[[arms]]\nname="b"\n', "ab", "unknown key 'sesions'"),
        ('sessions = "3"\n', "check", "sessions must be int"),
        ('[[arms]]\nname="a"\n', "ab", "needs two [[arms]]"),
        ('[[arms]]\nname="a"\n[[arms]]\nname="b"\n', "ab", "each arm names its own url"),
        ("good_rate = 0.2\nbad_rate = 0.1\n", "check", "0 < good_rate < bad_rate < 1"),
        ('good_rate = 0.01\nbad_rate = 0.2\nflags = ["--x"]\n', "minimize", "needs [start]"),
        ('[start]\nhealth = "/health"\n', "ab", "[start] needs `command`"),
        ("min_effect = 2.0\ngood_rate = 0.01\nbad_rate = 0.2\n", "check", "not read by"),
        ("url = [", "ab", "not TOML"),
    ],
)
def test_a_bad_plan_is_one_line(tmp_path: Path, text: str, verb: str, says: str) -> None:
    with pytest.raises(ForensicsError, match=None) as err:
        load_plan(_write(tmp_path, text), verb)
    assert says in str(err.value)


def test_the_plan_keys_are_documented() -> None:
    docs = (ROOT / "docs" / "investigations.md").read_text(encoding="utf-8")
    assert keys_markdown() in docs


# --- end to end, against the stand-in server --------------------------------------


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan(tmp: Path, body: str, extra: str = "--rule x+y=0.25 --base-rate 0.01") -> Path:
    port = _port()
    head = (f'url = "http://127.0.0.1:{port}"\nsessions = 8\nrounds = 2\n'
            f'[start]\ncommand = "{sys.executable} -m tests.model_server --port {port} '
            f'{extra} {{flags}}"\ntimeout_s = 60\n')  # fmt: skip
    # top-level keys must come before [start]: put the body's first
    top, _, tables = body.partition("[[")
    return _write(tmp, top + head + (("[[" + tables) if tables else ""))


AB = 'max_requests = 1500\n[[arms]]\nname = "off"\nflags = "{a}"\n[[arms]]\nname = "on"\nflags = "{b}"\n'


def test_ab_decides_the_planted_difference_and_stops_early(tmp_path: Path) -> None:
    plan = _plan(tmp_path, AB.format(a="", b="--x --y"))
    db = tmp_path / "db.duckdb"
    res = ex.ab(plan, db, tmp_path / "out")
    assert res.decision == "differs" and res.exit_code == 1, res.error
    assert sum(b.requests for b in res.blocks) < 1500  # stopped before the budget
    assert res.arms[1]["rate"] > res.arms[0]["rate"] and res.ci[0] > 1
    # every block is a run of the incident, tagged with its arm, flags and the plan
    runs = {r["run"]: r["tags"] for r in list_runs(db)}
    assert set(runs) == set(res.runs)
    first = runs[res.runs[0]]
    assert first["arm"] == "off" and first["plan_sha256"] == load_plan(plan, "ab").sha256
    assert [b.arm for b in res.blocks[:4]] == ["off", "on", "on", "off"]  # ABBA
    assert {t["decision"] for t in runs.values()} == {"differs"}  # tagged once decided
    said = " ".join(compare(db).sentences())
    assert "blocks of the sequential experiment" in said and "does not hold" in said
    assert (tmp_path / "out" / "off-b0.server.log").exists()


def test_two_harmless_flags_never_differ(tmp_path: Path) -> None:
    plan = _plan(tmp_path, AB.format(a="--p", b="--q"), extra="--base-rate 0.2")
    res = ex.ab(plan, None, tmp_path / "out")
    assert res.decision in ("equivalent", "undecided"), res.as_dict()


def test_check_exits_one_for_a_bad_and_zero_for_a_good_configuration(tmp_path: Path) -> None:
    rates = "good_rate = 0.02\nbad_rate = 0.15\nmax_requests = 1500\n"
    bad = _plan(tmp_path, rates + '[[arms]]\nname = "both"\nflags = "--x --y --z"\n')
    proc = cli("experiment", "check", str(bad), "--out", str(tmp_path / "b"), "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 1 and doc["decision"] == "bad", proc.stderr.decode()
    good = _plan(tmp_path, rates + '[[arms]]\nname = "one"\nflags = "--x"\n')
    proc = cli("experiment", "check", str(good), "--out", str(tmp_path / "g"), "--json")
    assert proc.returncode == 0 and orjson.loads(proc.stdout)["decision"] == "good"


def test_minimize_returns_exactly_the_planted_pair(tmp_path: Path) -> None:
    plan = _plan(tmp_path, 'good_rate = 0.02\nbad_rate = 0.15\ntest_requests = 1500\n'
                 'flags = ["--a", "--x", "--b", "--y", "--c"]\n')  # fmt: skip
    out = tmp_path / "out"
    res = ex.minimize(plan, None, out)
    assert res.subset == ["--x", "--y"] and res.one_minimal and res.exit_code == 0
    assert res.tests[0]["flags"] == ["--a", "--x", "--b", "--y", "--c"]
    assert res.tests[0]["decision"] == "bad" and res.tests[1]["decision"] == "good"
    # --resume: the last block cut short runs again, every other is read back
    last = res.blocks[-1]
    cut = out / last.arm / f"b{len(res.blocks) - 1}.jsonl"
    lines = cut.read_bytes().splitlines(keepends=True)
    cut.write_bytes(b"".join(x for x in lines if b"forensics_run_end" not in x))
    again = ex.minimize(plan, None, out, resume=True)
    assert again.subset == res.subset and again.tests == res.tests
    assert [b.as_dict() for b in again.blocks] == [b.as_dict() for b in res.blocks]


def test_a_server_killed_mid_block_keeps_the_blocks_done(tmp_path: Path) -> None:
    rates = "good_rate = 0.04\nbad_rate = 0.06\nmax_requests = 6000\n"
    plan = _plan(tmp_path, rates, extra="--base-rate 0.05 --die-after 70")
    proc = cli("experiment", "check", str(plan), "--out", str(tmp_path / "o"), "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 128 and doc["decision"] == "error"
    assert "the server exited" in doc["error"] and doc["blocks"], doc
    assert "error: " in proc.stderr.decode() or doc["error"]


def test_a_plan_error_is_json_and_exit_128(tmp_path: Path) -> None:
    bad = _write(tmp_path, "nope = 1\n")
    proc = cli("experiment", "ab", str(bad), "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 128 and doc["decision"] == "error" and "nope" in doc["error"]
    assert doc["schema"] == "forensics.experiment/1" and doc["verb"] == "ab"


def test_dry_run_prints_the_schedule(tmp_path: Path) -> None:
    plan = _plan(tmp_path, AB.format(a="", b="--x"))
    proc = cli("experiment", "ab", str(plan), "--dry-run", "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 0 and [b["arm"] for b in doc["schedule"][:4]] == [
        "off", "on", "on", "off"]  # fmt: skip


def test_suspects_writes_the_plan_of_the_verdicts_experiment(tmp_path: Path) -> None:
    """The printed experiment and `suspects --plan` are one object: the verdict's cause
    (the abort cause: an environment variable on decode) as the second arm of an `ab` plan
    that loads, against the run's own server, sessions and rounds."""
    from forensics.synthetic.planted import generate_planted, write_planted

    files = write_planted(generate_planted("abort", seed=0), tmp_path / "in")
    results = next(f for f in files if f.suffix == ".jsonl")  # a stock run's header
    results.write_bytes(b'{"forensics_run": "incident", "url": "http://router:30000", '
                        b'"sessions": 64, "rounds": 0}\n' + results.read_bytes())  # fmt: skip
    db = tmp_path / "db.duckdb"
    assert cli("ingest", *map(str, files), "--db", str(db), "--run", "incident").returncode == 0
    path = tmp_path / "next.toml"
    proc = cli("suspects", "--db", str(db), "--plan", str(path))
    assert proc.returncode == 0, proc.stderr.decode()
    plan = load_plan(path, "ab")
    assert [a.name for a in plan.arms] == ["as-is", "abort-page-reuse"]
    assert plan.arms[1].env == {"SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE": "1"}
    text = proc.stdout.decode()
    assert "next experiment (abort-page-reuse)" in " ".join(text.split())
    said = " ".join(proc.stderr.decode().split())
    assert f"plan written to {path} (abort-page-reuse, for the verdict (factor))" in said
    assert plan.start is not None and "{flags}" in plan.start["command"]
    assert "--rounds 0" not in text and int(plan.rounds) >= 1
    dry = cli("experiment", "ab", str(path), "--dry-run")  # runs as written
    assert dry.returncode == 0, dry.stderr.decode()


def test_resume_continues_an_experiment_from_its_finished_blocks(tmp_path: Path) -> None:
    """A check cut short (its last block's results without an end line) resumes: the
    finished blocks are read back, not run again, the cut one runs again."""
    rates = "good_rate = 0.04\nbad_rate = 0.06\nmax_requests = 96\n"
    plan = _plan(tmp_path, rates, extra="--base-rate 0.05")
    out = tmp_path / "o"
    first = ex.check(plan, None, out)
    assert first.decision == "undecided" and len(first.blocks) >= 2
    cut = out / "check" / f"b{len(first.blocks) - 1}.jsonl"
    lines = cut.read_bytes().splitlines(keepends=True)
    cut.write_bytes(b"".join(x for x in lines if b"forensics_run_end" not in x))
    kept = [b.as_dict() for b in first.blocks[:-1]]
    again = ex.check(plan, None, out, resume=True)
    assert [b.as_dict() for b in again.blocks[: len(kept)]] == kept
    assert len(again.blocks) == len(first.blocks) and again.name == first.name
    with pytest.raises(ForensicsError, match="holds an experiment"):
        ex.check(plan, None, out)
    other = _write(tmp_path, rates.replace("0.06", "0.07"), "other.toml")
    with pytest.raises(ForensicsError, match="another plan"):
        ex.check(other, None, out, resume=True)


def test_ctrl_c_keeps_the_blocks_done_and_stops_the_server(tmp_path: Path) -> None:
    """SIGINT once the second block has begun: exit 130, the decision `error` with the
    finished blocks, and the server's port closed (its process group stopped)."""
    import signal
    import socket
    import subprocess
    import time

    rates = "good_rate = 0.04\nbad_rate = 0.06\nmax_requests = 100000\n"
    plan = _plan(tmp_path, rates, extra="--base-rate 0.05")
    port = int(load_plan(plan, "check").url.rsplit(":", 1)[1])
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "experiment", "check", str(plan),
                             "--out", str(out), "--json"], stdout=subprocess.PIPE, cwd=ROOT)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (out / "check" / "b1.jsonl").exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(0.02)  # polling a file the command writes: the event, not a guess
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    doc = orjson.loads(stdout)
    assert doc["decision"] == "error" and "interrupted" in doc["error"] and doc["blocks"]
    with socket.socket() as s, pytest.raises(OSError):
        s.connect(("127.0.0.1", port))


@pytest.mark.parametrize("broken", ["start", "build"])
def test_an_untestable_configuration_is_125_for_bisect(tmp_path: Path, broken: str) -> None:
    """A [build] that fails or a server that exits before it is healthy: `check` says
    undecided (125, git bisect's skip), not bad."""
    fail = f"{sys.executable} -c 'raise SystemExit(3)'"
    body = "good_rate = 0.01\nbad_rate = 0.2\n"
    if broken == "build":
        plan = _plan(tmp_path, body)
        plan.write_text(plan.read_text() + f'[build]\ncommand = "{fail}"\n')
    else:
        plan = _write(tmp_path, body + f'[start]\ncommand = "{fail}"\ntimeout_s = 30\n')
    proc = cli("experiment", "check", str(plan), "--out", str(tmp_path / "o"), "--json")
    doc = orjson.loads(proc.stdout)
    assert proc.returncode == 125 and doc["decision"] == "undecided", doc
    assert ("[build] failed" if broken == "build" else "exited with code 3") in doc["error"]


def test_a_start_of_several_commands_runs_and_stops_them_all(tmp_path: Path) -> None:
    """`command` as a list (one a side of a PD deployment): all started, all stopped."""
    import os

    side = tmp_path / "side.py"
    pid = tmp_path / "side.pid"
    side.write_text(f"import os, time, pathlib\npathlib.Path({str(pid)!r}).write_text("
                    "str(os.getpid()))\ntime.sleep(600)\n")  # fmt: skip
    port = _port()
    server = f"{sys.executable} -m tests.model_server --port {port} --base-rate 0.01 {{flags}}"
    plan = _write(tmp_path, (
        f'url = "http://127.0.0.1:{port}"\nsessions = 4\nrounds = 1\ngood_rate = 0.02\n'
        f'bad_rate = 0.5\nmax_requests = 200\n[start]\ncommand = ["{sys.executable} {side}", '
        f'"{server}"]\ntimeout_s = 60\n'))  # fmt: skip
    res = ex.check(plan, None, tmp_path / "o")
    assert res.decision in ("good", "undecided") and res.blocks, res.as_dict()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid.read_text()), 0)
