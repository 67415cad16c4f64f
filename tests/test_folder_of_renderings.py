"""A folder as users copy it: one incident in every rendering journalctl makes of the real
.journal files (systemd-journal-remote), `-o cat` per host and of the merged journal,
the binary files themselves, and a README, a script, a note and a `.git/` beside them.
It stores exactly what the binary journals alone store: no host from a file name, no
entry or record twice; the files that are no log are listed as skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import forensics
from forensics.store.records import TABLES as RECORD_TABLES
from forensics.synthetic import incident as gen
from forensics.synthetic.journal_writer import render, write_journal
from forensics.writing import dedupe_source

RENDERINGS = ("export", "json", "short-iso-precise", "short", "cat")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the folder of every rendering, a folder of the binary journals alone)."""
    root = tmp_path_factory.mktemp("renderings")
    inc = gen.generate()
    journals = {}
    for host, entries in (("prefill", inc.prefill), ("decode", inc.decode)):
        export = gen.write_export(entries, root / f"{host}.export")
        journals[host] = write_journal(export, root / "journals" / f"{host}-0.journal")
    every, binary = root / "incident", root / "binary"
    every.mkdir()
    binary.mkdir()
    for host, files in journals.items():
        for fmt in RENDERINGS:
            render(files, fmt, every / f"{host}.{fmt}.log")
        for f in files:
            shutil.copy(f, every / f.name)
            shutil.copy(f, binary / f.name)
    render([f for fs in journals.values() for f in fs], "cat", every / "journal.cat.log")
    for d in (every, binary):
        gen.write_results(inc.results, d / "results.jsonl")
    (every / "README.md").write_text("# The incident\nCollected from both hosts.\n")
    (every / "collect.py").write_text("import subprocess\nprint('collected')\n")
    (every / "notes.txt").write_text("decode went first\nthen prefill\n")
    (every / ".git").mkdir()
    (every / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return every, binary


def _stored(db: Path) -> dict:
    """Entries by host and content, every typed table's rows and the quarantine."""
    _, entries = forensics.query_rows(
        "SELECT host, ts_us, message, count(*) FROM entries GROUP BY ALL ORDER BY ALL", db
    )
    tables = {t: forensics.query_rows(f"SELECT count(*) FROM {t}", db)[1][0][0]
              for t in ("results", *sorted(set(RECORD_TABLES.values())))}  # fmt: skip
    _, q = forensics.query_rows("SELECT count(*) FROM quarantine", db)
    return {"entries": entries, "tables": tables, "quarantined": q[0][0]}


def test_a_folder_of_every_rendering_stores_the_binary_journals_alone(
    folder: tuple[Path, Path], tmp_path: Path
) -> None:
    every, binary = folder
    alone = tmp_path / "alone.duckdb"
    forensics.ingest([str(binary)], alone)
    db = tmp_path / "every.duckdb"
    res = forensics.ingest([str(every)], db)
    want = _stored(alone)
    assert {h for h, *_ in want["entries"]} == {"decode-0", "prefill-0"}
    assert _stored(db) == want
    by_name = {Path(s.name).name: s for s in res.sources}
    for name in ("decode.cat.log", "prefill.cat.log", "journal.cat.log"):
        src = by_name[name]
        assert src.entries == 0 and src.duplicates > 0, (name, src)
        assert any("its host was a guess" in n and "sources restore" in n for n in src.notes)
    skipped = {n: s.reason for n, s in by_name.items() if s.status == "skipped"}
    assert set(skipped) == {"README.md", "collect.py", "notes.txt", ".git"}
    assert "ingest --format cat" in skipped["notes.txt"] and "Markdown" in skipped["README.md"]


def test_a_cat_rendering_named_with_format_cat_stays_and_dedupe_merges_it(
    folder: tuple[Path, Path], tmp_path: Path
) -> None:
    """`--format cat` is never merged by itself; the note says how much it repeats, and
    its command merges it across the host difference, tracebacks included."""
    every, _ = folder
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(every / "decode-0.journal")], db)
    res = forensics.ingest([str(every / "decode.cat.log")], db, fmt="cat", host="decode")
    (src,) = res.sources
    assert src.duplicates == 0
    assert any("source 2 repeats 100 % of source 1" in n for n in src.notes), src.notes
    got = dedupe_source(db, 2, 1)
    assert got["dropped"] == src.entries
    _, rows = forensics.query_rows("SELECT count(*) FROM entries WHERE source_id = 2", db)
    assert rows == [(0,)]


def test_a_plain_log_beside_its_export_is_noted_and_merged_by_its_command(
    folder: tuple[Path, Path], tmp_path: Path
) -> None:
    every, _ = folder
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(every / "prefill.export.log")], db)
    (src,) = forensics.ingest([str(every / "prefill.cat.log")], db).sources
    assert src.format == "sglang"  # its own time prefix; its host from its name
    assert any("source 2 repeats 100 % of source 1" in n for n in src.notes), src.notes
    _, before = forensics.query_rows("SELECT count(*) FROM checksums", db)
    dedupe_source(db, 2, 1)
    _, after = forensics.query_rows("SELECT count(*) FROM checksums", db)
    assert after[0][0] * 2 == before[0][0] > 0  # every checksum record once
