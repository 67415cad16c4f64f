"""The server an experiment's block runs against, when the plan says how to start it
(`[start]`): started with the arm's flags as separate arguments (never through a shell,
never from logged values), polled until its health URL answers 200, and stopped with its
whole process group. Its output is kept in a file beside the block's results.

Stopped on every exit: `down()` signals each process group even when its leader has
exited; a watchdog process (watchdog.py) holds a pipe from the experiment and stops the
groups when it closes, so a kill -9 of the experiment stops the server too; and the
groups are written to `server.pids` in the experiment's folder, which `--resume` reads
to stop a server a killed run left before it starts another."""

from __future__ import annotations

import base64
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import orjson

from ..errors import ForensicsError
from .plan import Arm, split_command

POLL_S = 0.2  # between health probes
STOP_S = 10.0  # SIGTERM, then SIGKILL after this
PIDS = "server.pids"  # in the experiment's folder: the groups of the server running now
WATCHDOG = Path(__file__).with_name("watchdog.py")


class Untestable(ForensicsError):
    """The configuration could not be tested: a build or start that failed, a server
    never healthy (`check` exits 125 for it, as git bisect's "skip")."""


def argv_of(command: str, flags: str) -> list[str]:
    """`command` split as a shell would (no shell runs it), the token `{flags}` replaced by
    the arm's flags, each its own argument (the plan checked it splits)."""
    return split_command(Path("plan"), "[start] command", command, flags)


def run_build(command: str, log: Path) -> None:
    """`[build]`'s command, once; a failure makes the configuration untestable."""
    with log.open("wb") as fh:
        rc = subprocess.call(shlex.split(command), stdout=fh, stderr=subprocess.STDOUT)
    if rc != 0:
        raise Untestable(f"[build] failed with exit code {rc} (its output: {log})")


class Server:
    """The deployment of one configuration: `command`, or a list of them (one a side of a
    PD deployment: prefill, decode, the router), each in a process group of its own, all
    of them alive while a block runs; healthy when the health URL answers 200."""

    def __init__(self, start: dict, url: str, folder: Path) -> None:
        command = start["command"]
        self.commands = [str(c) for c in command] if isinstance(command, list) else [command]
        health = url.rstrip("/") + str(start.get("health", "/health"))
        self.health, self.auth = _without_user_info(health)
        self.timeout_s = float(start.get("timeout_s", 900))
        self.procs: list[subprocess.Popen] = []
        self.config: tuple[str, tuple] | None = None
        self.pids = folder / PIDS
        self.watchdog: subprocess.Popen | None = None

    def up(self, arm: Arm, log: Path) -> bool:
        """The deployment in `arm`'s configuration, healthy; False when the running one
        already is (the BB of ABBA reuses it)."""
        config = (arm.flags, tuple(sorted(arm.env.items())))
        if self.config == config and self.alive():
            return False
        self.down()
        for i, command in enumerate(self.commands):
            out = log if len(self.commands) == 1 else log.with_suffix(f".{i}.log")
            with out.open("wb") as fh:
                self.procs.append(subprocess.Popen(
                    argv_of(command, arm.flags), stdout=fh, stderr=subprocess.STDOUT,
                    start_new_session=True, env={**os.environ, **arm.env}))  # fmt: skip
        self._guard()
        self.config = config
        self._wait_healthy(log)
        return True

    def _guard(self) -> None:
        """The groups written down and handed to a watchdog that outlives this process."""
        groups = [p.pid for p in self.procs]  # a session's leader: its pid is its group's
        self.pids.write_bytes(orjson.dumps([{"pgid": g, "start": _started(g)} for g in groups]))
        self.watchdog = subprocess.Popen(
            [sys.executable, "-I", str(WATCHDOG), *map(str, groups)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def _wait_healthy(self, log: Path) -> None:
        deadline = time.monotonic() + self.timeout_s
        request = urllib.request.Request(self.health, headers=self.auth)
        while time.monotonic() < deadline:
            dead = next((p for p in self.procs if p.poll() is not None), None)
            if dead is not None:
                code = dead.returncode
                self.down()
                raise Untestable(f"the server exited with code {code} before it was healthy "
                                 f"(its output: {log})")  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(POLL_S)
        self.down()
        raise Untestable(f"the server was not healthy within {self.timeout_s:g} s ({self.health})")

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def exit_code(self) -> int | None:
        return next((p.poll() for p in self.procs if p.poll() is not None), None)

    def down(self) -> None:
        """Every process group, the last started first, its leader alive or not: SIGTERM,
        then SIGKILL; then the watchdog let go and the pid file removed."""
        procs, self.procs, self.config = self.procs, [], None
        for proc in reversed(procs):
            stop_group(proc.pid, proc)
        if self.watchdog is not None:
            self.watchdog.stdin.close()  # type: ignore[union-attr]  # its groups are gone
            self.watchdog.wait()
            self.watchdog = None
        self.pids.unlink(missing_ok=True)


def _without_user_info(url: str) -> tuple[str, dict[str, str]]:
    """The URL without `user:password@`, and the Basic authorization header it meant
    (urllib refuses user-info in a URL; the password never appears in a message)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    plain = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return plain, {"Authorization": f"Basic {token}"}


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_group(pgid: int, leader: subprocess.Popen | None = None) -> None:
    """SIGTERM to the group, SIGKILL after STOP_S; the leader (our child) reaped, so its
    zombie does not keep the group alive."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if _gone(pgid, leader):
            break
    if leader is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.wait(STOP_S)


def _gone(pgid: int, leader: subprocess.Popen | None) -> bool:
    deadline = time.monotonic() + STOP_S
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        if not group_alive(pgid):
            return True
        time.sleep(0.02)  # a group's end is no event a parent can wait on
    return False


def _started(pid: int) -> int | None:
    """A process's start time (clock ticks after boot, /proc/PID/stat field 22): a pid
    reused by another process starts later."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[19])


def stop_left(folder: Path) -> int:
    """The groups of a server a killed experiment left in `folder` stopped (a group whose
    leader's pid now names another process is not touched); how many were stopped."""
    path = folder / PIDS
    try:
        groups = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return 0
    stopped = 0
    for g in groups if isinstance(groups, list) else []:
        pgid, start = int(g.get("pgid", 0)), g.get("start")
        if pgid <= 1 or not group_alive(pgid):
            continue
        now = _started(pgid)
        if now is not None and start is not None and now != start:
            continue  # the pid is another process's now
        stop_group(pgid)
        stopped += 1
    path.unlink(missing_ok=True)
    return stopped
