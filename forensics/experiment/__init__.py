"""`forensics experiment`: run the experiment that ends an investigation, and stop it when
the answer is known.

- `ab PLAN`: two arms in interleaved ABBA blocks; after every pair of blocks an
  anytime-valid test of the two corruption rates (sequential.py) decides `differs`,
  `equivalent` or, at the budget, `undecided` (with the requests a decision would need).
- `check PLAN`: is this configuration bad? Wald's SPRT between `good_rate` and `bad_rate`:
  exit 0 good, 1 bad, 125 undecided or untestable — git bisect run's codes.
- `minimize PLAN`: ddmin over `flags`, each test a `check` (ddmin.py).

Every block is a reproducer run ingested into the incident (blocks.py); with `[start]` the
server is started per configuration and stopped afterwards (server.py). A plan, database
or reproducer error exits 128 (so `git bisect run` aborts rather than marking a commit
bad); Ctrl-C 130.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from ..analyses.stats import fmt_num
from ..errors import ForensicsError
from ..plural import counted
from .blocks import (
    Block,
    counts,
    experiment_name,
    finished,
    ingest_block,
    run_block,
    whole_lines,
)
from .ddmin import BAD, GOOD, UNDECIDED, ddmin
from .plan import DIRECTIONS, Arm, Plan, load_plan
from .sequential import BAD as BAD_CODE
from .sequential import CONTINUE, DIFFERS, AbTest, CheckTest, requests_needed
from .server import Server, Untestable, run_build, stop_left

SCHEMA = "forensics.experiment/1"
ABBA = (0, 1, 1, 0)
EXIT = {"equivalent": 0, "good": 0, "found": 0, "differs": 1, "bad": 1, "undecided": 125,
        "error": 128}  # fmt: skip


@dataclass
class ExperimentResult:
    verb: str
    name: str = ""
    out: str | None = None
    decision: str = "undecided"
    arms: list[dict] = field(default_factory=list)
    rr: float | None = None
    ci: list[float | None] | None = None
    p: float | None = None
    blocks: list[Block] = field(default_factory=list)
    subset: list[str] | None = None
    tests: list[dict] = field(default_factory=list)
    one_minimal: bool | None = None
    error: str | None = None
    needed: int | None = None  # judged requests an arm a decision would need
    why: str = ""
    schedule: list[dict] | None = None  # --dry-run
    interrupted: bool = False
    no_reply_p: float | None = None  # ab: Fisher's p of the arms' no-reply shares
    summary: dict | None = None  # --dry-run: the blocks the budget allows, in all
    notes: list[str] = field(default_factory=list)  # --resume: what was read back, and how

    @property
    def runs(self) -> list[str]:
        return [b.run for b in self.blocks]

    @property
    def exit_code(self) -> int:
        if self.schedule is not None:  # a dry run: nothing ran, nothing decided
            return 0
        if self.interrupted:
            return 130
        if self.verb == "minimize" and self.decision == "bad":
            return 0  # found
        if self.verb == "minimize" and self.decision != "error":
            return 125
        return EXIT[self.decision]

    def as_dict(self) -> dict:
        return {"schema": SCHEMA, "verb": self.verb, "experiment": self.name, "out": self.out,
                "decision": self.decision, "arms": self.arms, "rr": _num(self.rr),
                "rr_text": None if self.rr is None else fmt_num(self.rr),
                "ci": self.ci, "p": _num(self.p), "blocks": [b.as_dict() for b in self.blocks],
                "runs": self.runs, "subset": self.subset, "tests": self.tests,
                "one_minimal": self.one_minimal, "error": self.error,
                "requests_needed": self.needed, "why": self.why,
                "no_reply_p": _num(self.no_reply_p),
                "schedule": self.schedule, "schedule_summary": self.summary,
                "notes": self.notes}  # fmt: skip


def _num(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def _arms(arms: list[Arm], blocks: list[Block]) -> list[dict]:
    """Each arm's counts: requests, and sessions (`ab` decides on session rates: a
    session is corrupted when any of its replies is)."""
    out = []
    for a in arms:
        mine = [b for b in blocks if b.arm == a.name]
        n, x = sum(b.requests for b in mine), sum(b.corrupted for b in mine)
        sn, sx = sum(b.sessions for b in mine), sum(b.sessions_corrupted for b in mine)
        out.append({"name": a.name, "flags": a.flags, "requests": n, "corrupted": x,
                    "no_reply": sum(b.no_reply for b in mine),
                    "rate": x / n if n else None, "sessions": sn,
                    "sessions_corrupted": sx,
                    "session_rate": sx / sn if sn else None})  # fmt: skip
    return out


@contextlib.contextmanager
def _session(plan: Plan, res: ExperimentResult, out: str | Path | None,
             db: str | Path | None, resume: bool = False) -> Iterator[Path]:  # fmt: skip
    """The experiment's folder; errors, Ctrl-C (SIGTERM alike) and a dead server end it
    with the blocks done kept and the decision `error`."""
    res.name = experiment_name(plan)
    folder = Path(out) if out is not None else Path("experiments") / res.name
    _begin(folder, plan, res, resume)
    try:
        with _terminate_as_interrupt():
            yield folder
    except KeyboardInterrupt:
        res.decision, res.interrupted = "error", True
        res.error = f"interrupted: {len(res.blocks)} blocks kept in {folder}"
    except ForensicsError as exc:
        res.decision, res.error = "error", f"{exc} ({len(res.blocks)} blocks kept in {folder})"
        if isinstance(exc, Untestable) and res.verb in ("check", "minimize"):
            res.decision = "undecided"
    if db is not None and res.blocks:  # the decision goes into the blocks' runs
        from ..store.runs import tag_runs

        tag_runs(db, res.runs, {"decision": res.decision})


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM handled as Ctrl-C is (the same handler runs: the reproducer's, or the
    command's), so `kill` ends an experiment with its blocks kept and its server down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


STATE = "experiment.json"  # the folder's: name, verb, plan hash (what --resume checks)


def _begin(folder: Path, plan: Plan, res: ExperimentResult, resume: bool) -> None:
    """A new experiment's folder and its state file, or (--resume) the state of the one
    in `folder`, which must be this plan's."""
    state = folder / STATE
    if folder.exists() and not folder.is_dir():
        raise ForensicsError(f"--out {folder}: not a folder")
    if resume:
        try:
            got = orjson.loads(state.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            raise ForensicsError(f"--resume: {folder} holds no experiment ({STATE})") from None
        if got.get("plan_sha256") != plan.sha256 or got.get("verb") != plan.verb:
            raise ForensicsError(f"--resume: {folder} is another plan's or verb's experiment")
        res.name = str(got["name"])
    else:
        if state.exists():
            raise ForensicsError(f"{folder} holds an experiment: --resume it, or another --out")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            state.write_bytes(orjson.dumps({"name": res.name, "verb": plan.verb,
                                            "plan_sha256": plan.sha256}))  # fmt: skip
        except OSError as exc:
            raise ForensicsError(f"--out {folder}: {exc.strerror or exc}") from None
    res.out = str(folder)


def previous_blocks(
    folder: Path, name: str, db: Path | None = None, notes: list[str] | None = None
) -> list[Block]:
    """The blocks an interrupted experiment finished, in order: a block is finished when
    its run is in the incident, or when every request was judged (its results end with
    an end line not interrupted) — then it is ingested now, if it was not. The first
    other block was cut short: it runs again, and the rest after it. A results file
    that ends mid-line (or holds a line that does not read) is read up to its last whole
    line, and `notes` says so."""
    held = _runs_in(db)
    out = []
    for k in range(10**6):
        found = sorted(folder.glob(f"*/b{k}.jsonl"))
        if len(found) != 1:
            break
        path, arm = found[0], found[0].parent.name
        run = f"{name}/{arm}/b{k}"
        bad = whole_lines(path)[1]
        if run not in held:
            if not finished(path):
                cut = f" ({counted(bad, 'line')} of it not read: a file cut mid-line)"
                _said(notes, f"block {k} ({arm}) did not finish{cut if bad else ''}: it "
                      "runs again, and the blocks after it")  # fmt: skip
                break
            if db is not None:
                ingest_block(path, run, db)
        elif bad:
            _said(notes, f"block {k} ({arm}): {counted(bad, 'line')} of {path.name} not read (a "
                  "file cut mid-line?): counted up to its last whole line; the incident holds the "
                  "block as it was ingested")  # fmt: skip
        out.append(counts(path, arm, run))
    return out


def _said(notes: list[str] | None, note: str) -> None:
    if notes is not None:
        notes.append(note)


def _runs_in(db: Path | None) -> set[str]:
    if db is None or not db.exists():
        return set()
    from ..analyses.runs import list_runs

    return {r["run"] for r in list_runs(db)}


class _Runner:
    """Blocks against their servers: a server is (re)started when the configuration
    changes, and a server that died during a block is an error."""

    def __init__(self, plan: Plan, folder: Path, db: Path | None, resume: str = "",
                 notes: list[str] | None = None) -> None:  # fmt: skip
        self.plan, self.folder, self.db = plan, folder, db
        if resume:  # a server a killed run left holds the port: stopped first
            stop_left(folder)
        self.previous = previous_blocks(folder, resume, db, notes) if resume else []
        if plan.build is not None:  # once an invocation, before the first block
            run_build(str(plan.build["command"]), folder / "build.log")
        self.server = (Server(plan.start, str(plan.url), folder) if plan.start is not None
                       else None)  # fmt: skip
        self.started = time.monotonic()

    def block(self, arm: Arm, k: int, name: str, res: ExperimentResult) -> Block:
        if k < len(self.previous):  # --resume: a block finished before
            b = self.previous[k]
            if b.arm != arm.name:
                raise ForensicsError(f"--resume: block {k} is arm {b.arm}'s, not {arm.name}'s")
            res.blocks.append(b)
            return b
        if self.server is not None:
            self.server.up(arm, self.folder / f"{arm.name}-b{k}.server.log")
        try:
            b = run_block(self.plan, arm, k, name, self.folder, self.db)
        except ForensicsError as exc:
            raise ForensicsError(f"block {name}/{arm.name}/b{k}: {self._why(exc)}") from None
        if self.server is not None and not self.server.alive():
            res.blocks.append(b)
            raise ForensicsError(f"the server exited (code {self.server.exit_code()}) during "
                                 f"block {b.run}")  # fmt: skip
        res.blocks.append(b)
        return b

    def _why(self, exc: ForensicsError) -> str:
        if self.server is not None and not self.server.alive():
            return f"the server exited (code {self.server.exit_code()}) during the block"
        return str(exc)

    def out_of_time(self) -> bool:
        limit = self.plan.max_minutes
        return limit is not None and time.monotonic() - self.started > float(limit) * 60

    def close(self) -> None:
        if self.server is not None:
            self.server.down()


def ab(plan_path: str | Path, db: str | Path | None = None, out: str | Path | None = None,
       dry_run: bool = False, resume: bool = False) -> ExperimentResult:  # fmt: skip
    """Two arms in ABBA blocks until the sequential test decides (see the module)."""
    plan = load_plan(plan_path, "ab")
    res = ExperimentResult("ab")
    res.arms = _arms(plan.arms, [])
    if dry_run:
        res.schedule = _schedule(plan, [plan.arms[i] for i in ABBA], res)
        return res
    with _session(plan, res, out, db, resume) as folder:
        runner = _Runner(plan, folder, Path(db) if db is not None else None,
                         res.name if resume else "", res.notes)  # fmt: skip
        try:
            _ab_loop(plan, res, runner)
        finally:
            runner.close()
    res.arms = _arms(plan.arms, res.blocks)
    res.no_reply_p = _no_reply_p(res.blocks, plan)
    return res


def _no_reply_p(blocks: list[Block], plan: Plan) -> float | None:
    """Fisher's p of the arms' no-reply shares: requests that got no reply are not judged,
    so arms that lose them unequally may not compare alike (informative censoring)."""
    from ..analyses.stats import two_by_two

    sides = [[b for b in blocks if b.arm == a.name] for a in plan.arms]
    got = [(sum(b.no_reply for b in s), sum(b.sent for b in s)) for s in sides]
    if not all(n for _, n in got) or not any(x for x, _ in got):
        return None
    return two_by_two(got[1][0], got[1][1], got[0][0], got[0][1]).p_value


def _ab_loop(plan: Plan, res: ExperimentResult, runner: _Runner) -> None:
    test = AbTest((), float(plan.alpha), float(plan.min_effect),
                  None if plan.max_diff is None else float(plan.max_diff),
                  DIRECTIONS[str(plan.direction)])  # fmt: skip
    k = 0
    while True:
        sent = sum(b.sent for b in res.blocks)
        if sent + 2 * _expected(plan, res.blocks) > int(plan.max_requests) or (
            runner.out_of_time()
        ):
            res.why = "the budget ran out before the test decided"
            break
        pair = [
            runner.block(plan.arms[ABBA[k % 4]], k, res.name, res),
            runner.block(plan.arms[ABBA[(k + 1) % 4]], k + 1, res.name, res),
        ]
        k += 2
        a, b = sorted(pair, key=lambda blk: blk.arm != plan.arms[0].name)
        code = int(test.add_pair(a.sessions_corrupted, a.sessions, b.sessions_corrupted,
                                 b.sessions))  # fmt: skip
        _read(test, res, plan)
        if code != CONTINUE:
            res.decision = "differs" if code == DIFFERS else "equivalent"
            res.why = "decided after block pair " + str(k // 2)
            return
    judged = min(sum(x.requests for x in res.blocks if x.arm == a.name) for a in plan.arms)
    lo, hi = res.ci or (0.0, None)
    res.needed = requests_needed(lo or 0.0, hi if hi is not None else np.inf, judged,
                                 float(plan.min_effect))  # fmt: skip


def _read(test: AbTest, res: ExperimentResult, plan: Plan) -> None:
    st = test.state
    assert st is not None
    res.rr = None if np.isnan(st.rr) else float(st.rr)  # ∞: no corrupted session in A
    res.ci = [float(test.lo), None if not np.isfinite(test.hi) else float(test.hi)]
    res.p = float(test.p)


def check(plan_path: str | Path, db: str | Path | None = None, out: str | Path | None = None,
          dry_run: bool = False, resume: bool = False) -> ExperimentResult:  # fmt: skip
    """Is this configuration bad? (See the module: exit 0 good, 1 bad, 125 undecided.)"""
    plan = load_plan(plan_path, "check")
    arm = plan.arms[0] if plan.arms else Arm("check")
    res = ExperimentResult("check")
    if dry_run:
        res.schedule = _schedule(plan, [arm], res)
        return res
    with _session(plan, res, out, db, resume) as folder:
        runner = _Runner(plan, folder, Path(db) if db is not None else None,
                         res.name if resume else "", res.notes)  # fmt: skip
        try:
            res.decision = _check_loop(plan, arm, res, runner, float(plan.alpha),
                                       int(plan.max_requests))  # fmt: skip
        finally:
            runner.close()
    res.arms = _arms([arm], res.blocks)
    return res


def _check_loop(plan: Plan, arm: Arm, res: ExperimentResult, runner: _Runner, alpha: float,
                budget: int, first: int = 0) -> str:  # fmt: skip
    test = CheckTest((), alpha, float(plan.good_rate), float(plan.bad_rate))
    k, sent = first, 0
    while sent + _expected(plan, res.blocks[first:]) <= budget and not runner.out_of_time():
        b = runner.block(arm, k, res.name, res)
        sent, k = sent + b.sent, k + 1
        code = int(test.add_block(b.corrupted, b.requests))
        if code != CONTINUE:
            res.why = f"decided after {k - first} blocks"
            return "bad" if code == BAD_CODE else "good"
    res.why = "the budget ran out before the test decided"
    return "undecided"


def minimize(plan_path: str | Path, db: str | Path | None = None,
             out: str | Path | None = None, dry_run: bool = False,
             resume: bool = False) -> ExperimentResult:  # fmt: skip
    """The 1-minimal failing subset of the plan's flags (ddmin; each test a check at
    alpha / max_tests)."""
    plan = load_plan(plan_path, "minimize")
    res = ExperimentResult("minimize")
    flags = [str(f) for f in plan.flags]
    if dry_run:
        res.schedule = _schedule(plan, [Arm("all", " ".join(flags)), Arm("none")], res)
        return res
    # --resume: ddmin asks the same tests in the same order of the same outcomes, so the
    # finished blocks (each test's arm its own, t<i>) are read back as they come
    with _session(plan, res, out, db, resume) as folder:
        runner = _Runner(plan, folder, Path(db) if db is not None else None,
                         res.name if resume else "", res.notes)  # fmt: skip
        try:
            _minimize(plan, flags, res, runner)
        finally:
            runner.close()
    return res


def _minimize(plan: Plan, flags: list[str], res: ExperimentResult, runner: _Runner) -> None:
    alpha = float(plan.alpha) / int(plan.max_tests)

    def test(subset: list[str]) -> str:
        arm = Arm(f"t{len(res.tests)}", " ".join(subset))
        first = len(res.blocks)
        try:
            got = _check_loop(plan, arm, res, runner, alpha, int(plan.test_requests), first)
        except Untestable:
            got = UNDECIDED
        mine = res.blocks[first:]
        res.tests.append({"flags": subset, "decision": got, "runs": [b.run for b in mine],
                          "requests": sum(b.requests for b in mine)})  # fmt: skip
        return got

    found = ddmin(flags, test, int(plan.max_tests))
    res.subset, res.one_minimal, res.why = found.subset, found.one_minimal, found.why
    res.decision = "bad" if found.subset is not None and found.one_minimal else "undecided"


def per_block(plan: Plan) -> tuple[int, int]:
    """The requests a block sends, fewest and most: a session's round is a user turn and
    up to the scenario's `tool_steps` tool calls, each a request judged on its own."""
    from ..repro.scenario import load_scenario

    sc = load_scenario(None if plan.scenario is None else Path(str(plan.scenario)))
    rounds = int(plan.sessions) * int(plan.rounds)
    return rounds, rounds * (1 + (sc.tool_steps if sc.tools else 0))


def _expected(plan: Plan, blocks: list[Block]) -> float:
    """The requests the next block will send: the mean of those sent, else the fewest."""
    sent = [b.sent for b in blocks if b.sent]
    return sum(sent) / len(sent) if sent else float(per_block(plan)[0])


def _schedule(plan: Plan, cycle: list[Arm], res: ExperimentResult) -> list[dict]:
    """--dry-run: one cycle of blocks (the rest repeat it) and, in `res.summary`, how many
    blocks the budget allows and the worst case of them all."""
    fewest, most = per_block(plan)
    budget = int(plan.max_requests if plan.verb != "minimize" else plan.test_requests)
    calls = most // (int(plan.sessions) * int(plan.rounds))  # requests a round, at most
    start_s = float(plan.start.get("timeout_s", 900)) if plan.start is not None else 0.0
    worst_s = int(plan.rounds) * calls * float(plan.timeout_s) + start_s
    tests = int(plan.max_tests) if plan.verb == "minimize" else 1
    blocks = (max(budget // most, 1) * tests, max(budget // fewest, 1) * tests)
    res.summary = {"blocks": list(blocks), "requests_per_block": [fewest, most],
                   "budget": budget * tests, "worst_case_s_per_block": worst_s,
                   "worst_case_s": worst_s * blocks[1]}  # fmt: skip
    return [{"block": k, "arm": arm.name, "flags": arm.flags, "env": arm.env,
             "change": arm.change(), "requests": [fewest, most], "worst_case_s": worst_s}
            for k, arm in enumerate(cycle)]  # fmt: skip


__all__ = ["BAD", "GOOD", "ExperimentResult", "ab", "check", "minimize"]
