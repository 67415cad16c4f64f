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


def test_every_writer_waits_and_reads_its_inputs_meanwhile(tmp_path: Path) -> None:
    """`sources remove|relabel --wait` wait like ingest; an ingest that meets a held
    catalog reads (stages) its inputs first and waits only to register them."""
    from .helpers import cli

    log = tmp_path / "decode-0.log"
    log.write_text("[2026-09-24 01:50:40] Decode batch, #running-req: 3, #token: 10, "
                   "token usage: 0.01, gen throughput (token/s): 1.0, #queue-req: 0\n")  # fmt: skip
    other = tmp_path / "decode-1.log"
    other.write_text(log.read_text().replace("#running-req: 3", "#running-req: 4"))
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(log)], db)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (
            ["sources", "remove", "1"],
            ["sources", "relabel", "1", "--host", "h"],
            ["copy", str(tmp_path / "c.duckdb")],
            ["mv", str(tmp_path / "m.duckdb")],
        ):
            r = cli(*args, "--wait", "0", "--db", str(db))  # every writer waits 60 s unasked
            assert r.returncode == 2 and b"--wait SECONDS" in r.stderr, r.stderr
        staged = threading.Event()
        done: list = []

        def read_then_wait() -> None:
            def waiting() -> None:  # called when it meets the lock: the input is read by now
                staged.set()

            done.append(forensics.ingest([str(other)], db, wait=120, waiting=waiting))

        worker = threading.Thread(target=read_then_wait)
        worker.start()
        assert staged.wait(120)
        assert any(p.name.startswith(".ingest-") and any(p.rglob("entries-*"))
                   for p in (tmp_path / "db.shards").iterdir())  # fmt: skip
        holder.stdin.close()
        worker.join(120)
        assert done and done[0].sources[0].status == "ingested"
        r = cli("sources", "relabel", "1", "--host", "h", "--wait", "30", "--db", str(db))
        assert r.returncode == 0, r.stderr
    finally:
        holder.kill()
        holder.wait()
