"""The input's sha256 hashed ahead (store/ahead.py): the digest stored is always that of
the bytes the reader read, whoever computed it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from forensics.errors import ForensicsError
from forensics.store import ahead
from forensics.store.inputs import Input, open_input

from .helpers import cli, connect_read_only


def _log(path: Path, mb: int = 5) -> bytes:
    line = b"2026-11-29T07:00:00.000104+0000 decode-0 python3[3001]: [TP0] Decode batch\n"
    data = line * ((mb << 20) // len(line))
    path.write_bytes(data)
    return data


def _read_all(path: Path) -> tuple[str, int, bool]:
    """(digest, bytes read, whether the reader left hashing to the hash ahead)."""
    opened = open_input(Input(str(path), path))
    try:
        while opened.stream.read(1 << 20):
            pass
        return opened.hasher.hexdigest(), opened.hasher.nbytes, opened.hasher.sha is None
    finally:
        opened.stream.close()


def _finished(path: Path) -> None:
    """Wait for the hash ahead of `path` to end (its process is what the test awaits)."""
    st = path.stat()
    ahead._pending[(st.st_dev, st.st_ino)].wait()


def test_the_hash_ahead_is_the_files(tmp_path: Path) -> None:
    log = tmp_path / "decode.log"
    data = _log(log)
    ahead.hash_ahead([str(log)])
    digest, n, claimed = _read_all(log)
    assert claimed
    assert (digest, n) == (hashlib.sha256(data).hexdigest(), len(data))
    assert not ahead._pending  # taken, its process reaped


@pytest.mark.parametrize("change", ["appended", "rewritten in place"])
def test_a_file_changed_after_its_hash_ahead_is_hashed_as_read(tmp_path: Path, change) -> None:
    log = tmp_path / "decode.log"
    data = _log(log)
    ahead.hash_ahead([str(log)])
    _finished(log)  # hashed before the change: that hash must not be taken
    if change == "appended":
        with open(log, "ab") as f:
            f.write(b"one more line\n")
        data += b"one more line\n"
    else:
        data = data.replace(b"Decode", b"DECODE", 1)  # the same size
        with open(log, "r+b") as f:
            f.write(data[:100])
        st = log.stat()
        os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    digest, n, claimed = _read_all(log)
    assert claimed
    assert (digest, n) == (hashlib.sha256(data).hexdigest(), len(data))


def test_no_hash_ahead_for_several_inputs_small_files_or_fifos(tmp_path: Path) -> None:
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    _log(big)
    small.write_bytes(b"a line\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    ahead.hash_ahead([str(big), str(small)])
    ahead.hash_ahead([str(small)])
    ahead.hash_ahead([str(tmp_path / "missing.log")])
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the FIFO opens without a writer
    try:
        ahead.hash_ahead([str(fifo)])
    finally:
        os.close(fd)
    assert not ahead._pending
    assert _read_all(small)[2] is False


def test_the_cli_stores_the_inputs_sha256(tmp_path: Path) -> None:
    log = tmp_path / "decode.log"
    data = _log(log)
    db = tmp_path / "x.duckdb"
    assert cli("ingest", str(log), "--db", str(db)).returncode == 0
    con = connect_read_only(db)
    try:
        assert con.execute("SELECT sha256, bytes FROM sources").fetchall() == [
            (hashlib.sha256(data).hexdigest(), len(data))
        ]
    finally:
        con.close()


def test_an_input_cut_short_before_its_digest_is_a_clear_error(tmp_path: Path) -> None:
    log = tmp_path / "decode.log"
    _log(log)
    ahead.hash_ahead([str(log)])
    opened = open_input(Input(str(log), log))
    try:
        while opened.stream.read(1 << 20):
            pass
        os.truncate(log, 100)  # rotated by copytruncate after it was read
        with pytest.raises(ForensicsError, match="shrank"):
            opened.hasher.hexdigest()
    finally:
        opened.stream.close()
