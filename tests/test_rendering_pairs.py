"""One journal in two renderings is one set of entries: for every pair of the renderings
the real journalctl makes of a real .journal (systemd-journal-remote), in both orders,
the second adds no entry and the richer rendering's cursor, boot, monotonic time and
priority are kept whichever came first; a line a source really repeats stays; the
renderings no rule can match are named."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import forensics
from forensics.store import connect_read_only
from forensics.store.renderings import LEVELS
from forensics.store.sources import remove_source

from . import corpus

PAIRED = ["short", "short-iso", "short-iso-precise", "short-precise", "short-full",
          "short-unix", "json", "json-seq", "export", "journal"]  # fmt: skip
COLUMNS = "host, ident, pid, message, ts_us, cursor, boot_id, mono_us, priority"


def _ingest(db: Path, path: Path, fmt: str):
    return forensics.ingest([str(path)], db, fmt=fmt, year=corpus.T0 // 31_557_600_000_000 + 1970)


def _rows(db: Path) -> list[tuple]:
    con = connect_read_only(db)
    try:
        return sorted(con.execute(f"SELECT {COLUMNS} FROM entries").fetchall(), key=repr)
    finally:
        con.close()


def _copy(db: Path, to: Path) -> Path:
    shutil.copy2(db, to)
    shutil.copytree(db.with_suffix(".shards"), to.with_suffix(".shards"))
    return to


@pytest.fixture(scope="module")
def alone(renderings: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each rendering ingested on its own."""
    where = tmp_path_factory.mktemp("alone")
    out: dict[str, Path] = {}
    for fmt in PAIRED:
        out[fmt] = where / f"{fmt}.duckdb"
        _ingest(out[fmt], renderings[fmt], fmt)
    return out


@pytest.mark.parametrize("first", PAIRED)
def test_every_pair_of_renderings_is_one_set_of_entries(
    renderings: dict[str, Path], alone: dict[str, Path], tmp_path: Path, first: str
) -> None:
    """`first` stored, then each other rendering ingested: it adds no entry, and the
    entries are the richer rendering's alone (so either order gives the same)."""

    def pair(b: str) -> tuple[str, list[tuple], list[str]]:
        db = _copy(alone[first], tmp_path / f"{first}+{b}.duckdb")
        res = _ingest(db, renderings[b], b)
        return b, _rows(db), res.sources[0].notes

    with ThreadPoolExecutor(2) as pool:  # DuckDB's work runs beside the GIL
        got = list(pool.map(pair, [b for b in PAIRED if b != first]))
    expected = len(corpus.expected())
    for b, rows, notes in got:
        assert len(rows) == expected, (first, b, notes)  # the second added no entry
        richer = max(first, b, key=lambda f: LEVELS[f][0])
        assert rows == _rows(alone[richer]), (first, b)  # the richer rendering's fields


def test_removing_the_richer_rendering_restores_the_poorer(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    db = tmp_path / "x.duckdb"
    _ingest(db, renderings["short"], "short")
    res = _ingest(db, renderings["export"], "export")
    assert any("entries of source 1 are source 2's" in n and "sources restore 1" in n
               for n in res.sources[0].notes)  # fmt: skip
    assert all(r[5] is not None for r in _rows(db))  # every entry has export's cursor
    remove_source(db, res.sources[0].source_id)
    assert _rows(db) == _rows_of(renderings["short"], tmp_path)


def _rows_of(path: Path, tmp_path: Path) -> list[tuple]:
    db = tmp_path / "alone.duckdb"
    _ingest(db, path, "short")
    return _rows(db)


@pytest.mark.parametrize("unmatched", ["cat", "short-monotonic"])
def test_a_rendering_no_rule_matches_is_named(
    renderings: dict[str, Path], tmp_path: Path, unmatched: str
) -> None:
    db = tmp_path / "n.duckdb"
    _ingest(db, renderings["export"], "export")
    res = _ingest(db, renderings[unmatched], unmatched)
    (note,) = [n for n in res.sources[0].notes if "counts may double" in n]
    assert note.startswith("source 2 repeats ") and "% of source 1" in note


def test_blob_data_and_a_local_time_zone_are_named(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    """journalctl without --all shows a non-UTF-8 message as `[N blob data]`: it matches
    the entry at its place, and is said; a rendering made in another time zone (short has no zone) matches
    only hours apart: said, not deduped."""
    import subprocess

    db = tmp_path / "b.duckdb"
    _ingest(db, renderings["export"], "export")
    res = _ingest(db, renderings["short-noall"], "short-iso")
    notes = res.sources[0].notes
    assert "1 `[… blob data]` message (journalctl without --all) matched the entry at its " \
           "place" in notes  # fmt: skip
    # without --all a tab shows as spaces too: 90 % of 10 lines is no journal by the rule,
    # and the pair is said with the command that merges it
    assert any("sources dedupe 2 --against 1" in n for n in notes)
    tokyo = tmp_path / "tokyo.short"
    with open(tokyo, "wb") as fh:
        cmd = ["journalctl", "--no-pager", "--all", "-o", "short",
               f"--file={renderings['journal']}"]  # fmt: skip
        subprocess.run(cmd, stdout=fh, check=True, env={"TZ": "Asia/Tokyo"})
    db2 = tmp_path / "t.duckdb"
    _ingest(db2, renderings["export"], "export")
    res = _ingest(db2, tokyo, "short")
    (note,) = [n for n in res.sources[0].notes if "local time zone" in n]
    assert "source 2 matches source 1 only +9 h apart" in note


def test_sglang_stdout_beside_its_units_journal_is_named(tmp_path: Path) -> None:
    """SGLang's stdout saved to a file holds the lines its unit's journal holds: no rule
    matches a plain log entry for entry (its own time prefix), so ingest says how much of
    the journal it repeats."""
    demo = forensics.demo(tmp_path / "inc", db=tmp_path / "d.duckdb")
    rows = forensics.query(
        "SELECT message FROM entries WHERE host = 'decode-0' AND message LIKE '[2026-%' "
        "ORDER BY source_id, entry_no",
        demo.ingest.db,
    )["message"].to_list()
    stdout = tmp_path / "decode-0" / "sglang.log"
    stdout.parent.mkdir()
    stdout.write_text("\n".join(rows) + "\n")
    db = tmp_path / "s.duckdb"
    _ingest(db, tmp_path / "inc" / "decode-0.log", "short-iso-precise")
    res = forensics.ingest([str(stdout)], db, fmt="sglang", host="decode-0")
    (note,) = [n for n in res.sources[0].notes if "counts may double" in n]
    assert note.startswith("source 2 repeats ") and "% of source 1" in note


MINE = """
[[pattern]]
name = "fork_reboot"
table = "transfers"
needle = "after the"
regex = '''^after the (?P<reason>\\w+)$'''
[[pattern.samples]]
line = "after the reboot"
fields = { reason = "reboot" }
"""


def test_a_merge_keeps_the_records_a_users_patterns_made(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    """The export stored, then its short-iso-precise rendering read with --patterns: its
    entries are the export's, but the rows its patterns made stay (they were lost, and
    `sources restore` read them back with the built-in patterns only); restored, the
    rendering is read with the patterns it was ingested with, each row once."""
    pats = tmp_path / "mine.toml"
    pats.write_text(MINE)
    db = tmp_path / "p.duckdb"
    _ingest(db, renderings["export"], "export")
    year = corpus.T0 // 31_557_600_000_000 + 1970
    forensics.ingest([str(renderings["short-iso-precise"])], db, fmt="short-iso-precise",
                     year=year, patterns=[str(pats)])  # fmt: skip
    q = "SELECT source_id, reason FROM transfers WHERE pattern = 'fork_reboot'"
    assert forensics.query_rows(q, db)[1] == [(2, "reboot")]
    assert forensics.query_rows("SELECT count(*) FROM entries", db)[1] == [
        (len(corpus.expected()),)]  # fmt: skip
    remove_source(db, 1)  # the export gone: the rendering's entries back
    assert forensics.query_rows(q, db)[1] == [(2, "reboot")]
    assert forensics.query_rows("SELECT count(*) FROM entries", db)[1] == [
        (len(corpus.expected()),)]  # fmt: skip


def test_a_twin_read_with_the_same_patterns_keeps_its_rows_once(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    """Both read with the patterns: the rendering's rows go with its entries (the export
    has them: no row twice); the export removed, the rendering's entries are read again
    with the patterns its ingest stored, and the row is back, once."""
    pats = tmp_path / "mine.toml"
    pats.write_text(MINE)
    db = tmp_path / "p.duckdb"
    year = corpus.T0 // 31_557_600_000_000 + 1970
    for fmt in ("export", "short-iso-precise"):
        forensics.ingest([str(renderings[fmt])], db, fmt=fmt, year=year, patterns=[str(pats)])
    q = "SELECT source_id, reason FROM transfers WHERE pattern = 'fork_reboot'"
    assert forensics.query_rows(q, db)[1] == [(1, "reboot")]
    remove_source(db, 1)
    assert forensics.query_rows(q, db)[1] == [(2, "reboot")]
