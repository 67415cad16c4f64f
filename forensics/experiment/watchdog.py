"""Run by path, never imported: stops an experiment's server when the experiment is gone.

`python -I watchdog.py PGID…` reads its stdin, a pipe whose only writer is the experiment,
until it closes — the experiment closed it (the server is down), or the experiment died
(kill -9 included: the kernel closes its end). Then every process group named is sent
SIGTERM and, after STOP_S, SIGKILL. It imports nothing of the package: it must start fast
and must not fail where the experiment did."""

import contextlib
import os
import signal
import sys
import time

STOP_S = 10.0
POLL_S = 0.05


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a group of another user's: not ours any more
        return False
    return True


def stop(pgids: list[int], stop_s: float = STOP_S) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in pgids:
            if alive(pgid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, sig)
        deadline = time.monotonic() + stop_s
        while any(alive(g) for g in pgids) and time.monotonic() < deadline:
            time.sleep(POLL_S)  # the group's exit is not an event this process can wait on


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # only the pipe's end ends it
    pgids = [int(a) for a in sys.argv[1:]]
    while sys.stdin.buffer.read(1 << 16):
        pass
    stop(pgids)


if __name__ == "__main__":
    main()
