"""The server an experiment's block runs against, when the plan says how to start it
(`[start]`): started with the arm's flags as separate arguments (never through a shell,
never from logged values), polled until its health URL answers 200, and stopped with its
whole process group. Its output is kept in a file beside the block's results."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import ForensicsError
from .plan import Arm

POLL_S = 0.2  # between health probes
STOP_S = 10.0  # SIGTERM, then SIGKILL after this


class Untestable(ForensicsError):
    """The configuration could not be tested: a build or start that failed, a server
    never healthy (`check` exits 125 for it, as git bisect's "skip")."""


def argv_of(command: str, flags: str) -> list[str]:
    """`command` split as a shell would (no shell runs it), the token `{flags}` replaced by
    the arm's flags, each its own argument."""
    out: list[str] = []
    for token in shlex.split(command):
        if token == "{flags}":
            out += shlex.split(flags)
        elif "{flags}" in token:
            raise ForensicsError("[start] command: {flags} must be a word of its own")
        else:
            out.append(token)
    if not out:
        raise ForensicsError("[start] command is empty")
    return out


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

    def __init__(self, start: dict, url: str) -> None:
        command = start["command"]
        self.commands = [str(c) for c in command] if isinstance(command, list) else [command]
        self.health = url.rstrip("/") + str(start.get("health", "/health"))
        self.timeout_s = float(start.get("timeout_s", 900))
        self.procs: list[subprocess.Popen] = []
        self.config: tuple[str, tuple] | None = None

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
        self.config = config
        self._wait_healthy(log)
        return True

    def _wait_healthy(self, log: Path) -> None:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            dead = next((p for p in self.procs if p.poll() is not None), None)
            if dead is not None:
                code = dead.returncode
                self.down()
                raise Untestable(f"the server exited with code {code} before it was healthy "
                                 f"(its output: {log})")  # fmt: skip
            try:
                with urllib.request.urlopen(self.health, timeout=2) as r:
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
        """Every process group, the last started first: SIGTERM, then SIGKILL."""
        procs, self.procs, self.config = self.procs, [], None
        for proc in reversed(procs):
            if proc.poll() is not None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass
