"""Binary journal directories, compressed inputs, stdin, globs."""

from __future__ import annotations

import gzip
import lzma
import random
import shutil
from pathlib import Path

import orjson
import pytest
import zstandard

import forensics
from forensics.errors import ForensicsError
from forensics.synthetic.journal_writer import write_journal

from . import corpus
from .helpers import cli, counts, plain

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
        ("xz", lzma.compress),
        ("zst", lambda b: zstandard.ZstdCompressor().compress(b)),
    ],
)
def test_archive_cut_short_keeps_its_whole_lines(
    renderings, tmp_path: Path, db: Path, suffix, compress
) -> None:
    """A rotated segment still being written (Dynamo's .jsonl.gz, a log being zipped) is
    cut short: every whole line before the cut is stored, the line it ends inside is
    quarantined, a note says so."""
    rng = random.Random(7)  # lines that do not compress to nothing: every archive has blocks
    text = renderings["short-iso-precise"].read_bytes() + b"".join(
        b"2026-11-29T07:01:%02d.%06d+0000 decode-0 python3[3001]: filler %x\n"
        % (i // 1000, i % 1000, rng.getrandbits(64)) for i in range(20_000))  # fmt: skip
    data = compress(text)
    bad = tmp_path / f"cut.log.{suffix}"
    bad.write_bytes(data[: len(data) // 2])
    proc = cli("ingest", str(bad), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    (src,) = orjson.loads(proc.stdout)["sources"]
    assert any(f".{suffix} archive cut short" in n for n in src["notes"])
    con = plain(db)
    (line, reason, raw), *_ = con.execute(
        "SELECT line, reason, raw FROM quarantine ORDER BY line DESC"
    ).fetchall()
    # the line it ends inside is counted: stored + quarantined + markers = lines
    ((stored, quarantined, markers, lines),) = con.execute(
        """SELECT (SELECT sum(line_last - line_first + 1) FROM entries), quarantined, markers,
                  lines FROM sources"""
    ).fetchall()
    con.close()
    assert stored + quarantined + markers == lines == src["lines"]
    kept = b"".join(text.splitlines(keepends=True)[: src["lines"] - 1])
    # nothing lost before it (the cut may split a character: it reads as U+FFFD)
    after = text[len(kept) :].decode("utf-8", "replace")
    assert src["lines"] > 0 and text.startswith(kept) and after.startswith(raw.rstrip("\ufffd"))
    assert "the line it ends inside" in reason and line == src["lines"]


@pytest.mark.parametrize("suffix,compress", [("gz", gzip.compress), ("xz", lzma.compress)])
def test_corrupt_archive_is_a_clear_error(
    renderings, tmp_path: Path, db: Path, suffix, compress
) -> None:
    forensics.ingest([str(renderings["export"])], db)
    before = counts(db)
    data = bytearray(compress(renderings["short-iso-precise"].read_bytes() * 20))
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # damaged, not cut
    bad = tmp_path / f"bad.log.{suffix}"
    bad.write_bytes(bytes(data))
    proc = cli("ingest", str(bad), "--db", str(db))
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "corrupt" in err and "Traceback" not in err
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


def test_a_folder_keeps_its_logs_and_skips_what_is_no_log(tmp_path: Path) -> None:
    # what a folder an operator ingests holds besides logs: the tool's own database and
    # dashboard, an image, an empty file; ingested twice, as `forensics ingest .` is
    folder = tmp_path / "incident"
    folder.mkdir()
    (folder / "decode-0.log").write_text(
        "[2026-09-20 14:03:14] Decode batch, #running-req: 3, #token: 90, token usage: 0.01, "
        "#queue-req: 0\n"
    )
    (folder / "empty.log").write_bytes(b"")
    (folder / "forensics.html").write_text("<!DOCTYPE html>\n<html><body>" + "x\n" * 3698)
    (folder / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)
    db = folder / "forensics.duckdb"
    for _ in range(2):
        proc = cli("ingest", str(folder), "--db", str(db), "--json")
        assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    reasons = {Path(s["name"]).name: s["reason"] for s in doc["sources"]}
    assert reasons == {
        "decode-0.log": "already ingested as source 1 in run default (same sha256)",
        "empty.log": "an empty file, not a log",
        "forensics.html": "an HTML page, not a log",
        "shot.png": "an image, not a log (`forensics ingest --format cat "
        f"{folder / 'shot.png'}` reads it anyway)",
    }  # the database itself is never read: not even listed
    assert counts(db) == (1, 1, 0)
    # named on the command line, a page is an error; an empty file only says so
    proc = cli("ingest", str(folder / "forensics.html"), "--db", str(tmp_path / "x.duckdb"))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().endswith("forensics.html: an HTML page, not a log")
    res = forensics.ingest([str(folder / "empty.log")], tmp_path / "y.duckdb")
    assert [(s.status, s.reason) for s in res.sources] == [("skipped", "an empty file, not a log")]


def test_stdin_without_host_says_so(tmp_path: Path) -> None:
    proc = cli("ingest", "-", "--db", str(tmp_path / "s.duckdb"),
               stdin=b"[2026-09-20 14:03:14] Decode batch, #running-req: 3\n")  # fmt: skip
    assert proc.returncode == 0
    assert "stdin without --host" in proc.stdout.decode()


def test_a_folders_json_that_is_no_journal_is_skipped_with_why(tmp_path: Path) -> None:
    """An answer key or a config beside the logs is no journal: skipped, not read as one
    (it was: "0 entries, 10 lines quarantined")."""
    import json

    d = tmp_path / "in"
    d.mkdir()
    answers = [{"q": i, "answer": "x"} for i in range(10)]
    (d / "answers.json").write_text(json.dumps({"answers": answers}, indent=2))
    (d / "key.jsonl").write_text("\n".join(json.dumps(a) for a in answers) + "\n")
    entry = {"__REALTIME_TIMESTAMP": "1795935600000000", "MESSAGE": "hi", "_HOSTNAME": "h"}
    (d / "decode.json").write_text(json.dumps(entry) + "\n{not json\n")
    res = forensics.ingest([str(d)], tmp_path / "x.duckdb")
    got = {Path(s.name).name: (s.status, s.reason, s.entries, s.quarantined) for s in res.sources}
    assert got["answers.json"][:1] == got["key.jsonl"][:1] == ("skipped",)
    assert "JSON that is no journal, results, metrics file or JSON log" in got["answers.json"][1]
    assert "no journal field, time or message in its first line" in got["key.jsonl"][1]
    assert got["decode.json"] == ("ingested", "", 1, 1)  # a journal's bad line: quarantined
