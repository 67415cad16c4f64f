"""One block of an experiment: the reproducer run against an arm's server, its results
ingested into the incident (tagged with the experiment, the arm, its flags and the
plan's sha256, so `compare`, `suspects` and the dashboard see it), and its counts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from ..errors import ForensicsError
from ..statuses import NO_REPLY
from .plan import SEED_END, Arm, Plan


@dataclass
class Block:
    arm: str
    run: str
    sent: int  # requests sent
    requests: int  # judged (ok or corrupted)
    corrupted: int
    no_reply: int
    sessions: int  # sessions with a judged reply
    sessions_corrupted: int

    def as_dict(self) -> dict:
        return {"arm": self.arm, "run": self.run, "requests": self.requests,
                "corrupted": self.corrupted, "no_reply": self.no_reply,
                "sessions": self.sessions,
                "sessions_corrupted": self.sessions_corrupted}  # fmt: skip


def experiment_name(plan: Plan, now: dt.datetime | None = None) -> str:
    at = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{plan.path.stem}-{at}"


def counts(path: Path, arm: str, run: str) -> Block:
    """A results file's counts: judged requests, corrupted, no reply, and sessions (a
    session is corrupted when any of its replies is)."""
    b = Block(arm, run, 0, 0, 0, 0, 0, 0)
    sessions: dict[str, bool] = {}
    for row in whole_lines(path)[0]:
        status = row.get("status")
        if status is None:
            continue
        b.sent += 1
        if status in NO_REPLY:
            b.no_reply += 1
        elif status in ("ok", "corrupted"):
            b.requests += 1
            bad = status == "corrupted"
            b.corrupted += bad
            s = str(row.get("session"))
            sessions[s] = sessions.get(s, False) or bad
    b.sessions, b.sessions_corrupted = len(sessions), sum(sessions.values())
    return b


WAIT_S = 60.0  # for another writer of the incident (every writer's --wait default)
END_TAIL = 1 << 16  # the end line is the file's last: read this much of its end


def run_block(plan: Plan, arm: Arm, k: int, name: str, out: Path, db: Path | None,
              flags: str | None = None) -> Block:  # fmt: skip
    """Block `k` of arm `arm`: the reproducer against its URL, the results ingested."""
    from ..repro.run import repro

    run = f"{name}/{arm.name}/b{k}"
    folder = out / arm.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"b{k}.jsonl"
    tags = {"experiment": name, "arm": arm.name, "flags": arm.flags if flags is None else flags,
            "plan_sha256": plan.sha256, "block": str(k)}  # fmt: skip
    res = repro(plan.url_of(arm), sessions=int(plan.sessions), rounds=int(plan.rounds),
                model=plan.model, run=run, tags=tags, out=path, scenario=plan.scenario,
                timeout=float(plan.timeout_s), seed=(int(plan.seed) + k) % SEED_END,
                overwrite=True)  # fmt: skip
    if res.interrupted:
        raise KeyboardInterrupt
    if db is not None:
        ingest_block(path, run, db)
    return counts(path, arm.name, run)


def ingest_block(path: Path, run: str, db: Path, waiting: Callable[[], None] | None = None,
                 wait: float = WAIT_S) -> None:  # fmt: skip
    """The block's results into the incident, waiting for another writer like every
    writer does (two experiments may share one incident); `waiting` is called when the
    wait begins."""
    from ..writing import ingest

    got = ingest([str(path)], db, run=run, wait=wait, waiting=waiting)
    if any(s.status == "failed" for s in got.sources):
        raise ForensicsError(f"block {run}: its results were not ingested")


def whole_lines(path: Path) -> tuple[list[dict], int]:
    """A results file's records up to its last whole line, and how many lines did not
    read (a line cut where the file was cut, or damaged): they are left out."""
    rows, bad = [], 0
    with path.open("rb") as fh:
        for raw in fh:
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError:
                bad += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows, bad


def finished(path: Path) -> bool:
    """Every request of the block judged: its last line is the run's end line, and the
    run was not interrupted (Ctrl-C writes an end line too, saying so)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - END_TAIL))
            tail = fh.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        end = orjson.loads(tail)
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(end, dict) and "forensics_run_end" in end and end.get("interrupted") is False
