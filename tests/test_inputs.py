"""Binary journal directories, compressed inputs, stdin, globs."""

from __future__ import annotations

import gzip
import lzma
import shutil
from pathlib import Path

import pytest
import zstandard

import forensics
from forensics.errors import ForensicsError
from forensics.synthetic.journal_writer import write_journal

from . import corpus
from .helpers import cli, counts, messages

N = len(corpus.expected())


def _two_journals(tmp: Path) -> list[Path]:
    """Two real journal files (halves of the corpus), named as journald names rotations."""
    half = len(corpus.ENTRIES) // 2
    parts = [corpus.export_stream(range(half)), corpus.export_stream(range(half, 99))]
    out = []
    for i, data in enumerate(parts):
        src = tmp / f"part{i}.export"
        src.write_bytes(data)
        out += write_journal(src, tmp / f"j{i}" / f"part{i}.journal")
    return out


def test_rotated_journal_directories_searched_recursively(tmp_path: Path, db: Path) -> None:
    a, b = _two_journals(tmp_path)
    # Users copy /var/log/journal/<machine-id>/ from each host into folders of their own.
    machine = tmp_path / "evidence" / "decode-host" / "4f1b2c3d4e5f60718293a4b5c6d7e8f9"
    machine.mkdir(parents=True)
    shutil.copy(a, machine / "system@0005f1a2b3c4d5e6-0000000000000001-0006a1b2c3d4e5f6.journal")
    shutil.copy(b, machine / "system.journal")
    res = forensics.ingest([str(tmp_path / "evidence")], db)
    assert [s.format for s in res.sources] == ["journal", "journal"]
    assert counts(db)[:2] == (2, N)


def test_journal_needs_journalctl(
    tmp_path: Path, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (j, _) = _two_journals(tmp_path)
    monkeypatch.setattr("forensics.parsers.journald.binary.shutil.which", lambda _name: None)
    with pytest.raises(ForensicsError, match="Debian package: systemd"):
        forensics.ingest([str(j)], db)
    assert not db.exists()  # a failed first ingest leaves no database behind


@pytest.mark.parametrize(
    "suffix,compress",
    [
        ("gz", gzip.compress),
        ("zst", lambda b: zstandard.ZstdCompressor().compress(b)),
        ("xz", lzma.compress),
    ],
)
def test_compressed_inputs(renderings, tmp_path: Path, suffix, compress) -> None:
    plain_db, packed_db = tmp_path / "plain.duckdb", tmp_path / "packed.duckdb"
    src = renderings["short-iso-precise"]
    packed = tmp_path / f"decode.log.{suffix}"
    packed.write_bytes(compress(src.read_bytes()))
    forensics.ingest([str(src)], plain_db)
    res = forensics.ingest([str(packed)], packed_db)
    assert res.sources[0].compression == suffix
    assert res.sources[0].format == "short-iso-precise"
    assert messages(packed_db) == messages(plain_db)


def test_compressed_journal_file(renderings, tmp_path: Path, db: Path) -> None:
    packed = tmp_path / "corpus.journal.zst"
    packed.write_bytes(zstandard.ZstdCompressor().compress(renderings["journal"].read_bytes()))
    res = forensics.ingest([str(packed)], db)
    assert res.sources[0].format == "journal"
    assert counts(db)[1] == N


@pytest.mark.parametrize(
    "suffix,compress",
    [
        ("gz", gzip.compress),
        ("xz", lzma.compress),
        ("zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
def test_truncated_archive_is_a_clear_error(
    renderings, tmp_path: Path, db: Path, suffix, compress
) -> None:
    forensics.ingest([str(renderings["export"])], db)
    before = counts(db)
    data = compress(renderings["short-iso-precise"].read_bytes() * 20)
    bad = tmp_path / f"cut.log.{suffix}"
    bad.write_bytes(data[: len(data) // 2])
    proc = cli("ingest", str(bad), "--db", str(db))
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "truncated or corrupt" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert counts(db) == before


def test_stdin_and_globs(renderings, tmp_path: Path, db: Path) -> None:
    data = renderings["short-iso-precise"].read_bytes()
    proc = cli("ingest", "-", "--db", str(db), stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert counts(db)[:2] == (1, N)
    for i in range(3):
        (tmp_path / f"host{i}.export").write_bytes(renderings["export"].read_bytes() + b"\n" * i)
    res = forensics.ingest([str(tmp_path / "host*.export")], db)
    assert [s.status for s in res.sources] == ["ingested"] * 3
