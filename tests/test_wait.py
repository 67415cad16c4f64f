"""A second writer waits for the first instead of failing (`ingest --wait`)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

import forensics
from forensics.errors import ForensicsError

HOLD = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()"


def test_an_ingest_waits_for_the_writer_that_holds_the_file(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    log.write_text("[2026-09-24 01:50:40] Decode batch, #running-req: 3, #token: 10, "
                   "token usage: 0.01, gen throughput (token/s): 1.0, #queue-req: 0\n")  # fmt: skip
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(log)], db)  # the file exists, then another process holds it
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ForensicsError, match=r"locked by another process \(--wait SECONDS"):
            forensics.ingest([str(log)], db, run="second")
        began = threading.Event()
        done: list = []
        worker = threading.Thread(target=lambda: done.append(
            forensics.ingest([str(log)], db, run="second", wait=120, waiting=began.set)))  # fmt: skip
        worker.start()
        assert began.wait(120)  # it met the lock and is waiting, not failing
        holder.stdin.close()  # the holder lets go
        worker.join(120)
        assert done and done[0].sources[0].status == "skipped"  # same file: already stored
    finally:
        holder.kill()
        holder.wait()
