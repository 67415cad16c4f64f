"""Entries are one only by identity or by an in-order alignment (renderings.py): two logs
that agree line by line in most places stay two; one journal in two renderings, a merged
journal beside one host's file, or a journal beside journal-remote's copy of it, is one.
Every journal here is written by systemd-journal-remote and rendered by journalctl."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import forensics
from forensics.store import connect_read_only
from forensics.store.renderings import MIN_ENTRIES
from forensics.store.sources import dedupe_source, restore_source
from forensics.synthetic.journal_writer import export_entry, render, write_journal

T0 = 1_795_935_600_000_000  # 2026-11-29 07:00:00 UTC
HOSTS = ("prefill-0", "decode-0")


def _journal(
    where: Path, name: str, lines: list[tuple[str, int, str]], boot: str, mono0: int = 0
) -> Path:
    """A real .journal of (host, µs after T0, message) lines, pid 1 in a container."""
    stream = bytearray()
    for k, (host, dt, msg) in enumerate(lines):
        stream += export_entry([
            ("__REALTIME_TIMESTAMP", T0 + dt), ("__MONOTONIC_TIMESTAMP", mono0 + dt + k),
            ("_BOOT_ID", boot), ("_HOSTNAME", host), ("SYSLOG_IDENTIFIER", "python3"),
            ("_PID", 1), ("_TRANSPORT", "stdout"), ("PRIORITY", 6), ("MESSAGE", msg),
        ])  # fmt: skip
    export = where / f"{name}.export"
    export.write_bytes(bytes(stream))
    return write_journal(export, where / name / f"{name}.journal")[0]


def _lines(n: int, host: str = "decode-0", tag: str = "a") -> list[tuple[str, int, str]]:
    """n SGLang-like lines, ten a second (so a second holds several)."""
    return [(host, i * 100_000, f"Decode batch #{i} from {tag}, #running-req: {i % 7}")
            for i in range(n)]  # fmt: skip


def _ingest(db: Path, *paths: Path, **kw):
    return forensics.ingest([str(p) for p in paths], db, year=2026, **kw)


def _count(db: Path, where: str = "TRUE") -> int:
    con = connect_read_only(db)
    try:
        return con.execute(f"SELECT count(*) FROM entries WHERE {where}").fetchall()[0][0]
    finally:
        con.close()


def _notes(res) -> list[str]:
    return [n for s in res.sources for n in s.notes]


@pytest.mark.parametrize("fmt", ["short", "short-iso", "short-iso-precise", "json"])
def test_two_logs_that_share_most_lines_stay_two(tmp_path: Path, fmt: str) -> None:
    """Two containers with one hostname, pid 1, print 40 of their 50 lines alike in the
    same seconds: 100 entries stay (in either order), and the pair is said."""
    a = _lines(50)
    b = [*a[:40], *_lines(50, tag="b")[40:]]
    ja = _journal(tmp_path, "a", a, "a1" * 16)
    jb = _journal(tmp_path, "b", b, "b2" * 16)
    ra = render([ja], fmt, tmp_path / f"a.{fmt}")
    rb = render([jb], fmt, tmp_path / f"b.{fmt}")
    for first, second in ((ra, rb), (rb, ra)):
        db = tmp_path / f"{first.stem}-{fmt}.duckdb"
        _ingest(db, first)
        res = _ingest(db, second)
        assert _count(db) == 100
        if fmt != "json":  # rich entries of two boots are two by identity: nothing to say
            assert any("repeats 80 % of source 1" in n and "sources dedupe 2 --against 1" in n
                       for n in _notes(res)), _notes(res)  # fmt: skip


def test_text_beside_another_journals_json_stays(tmp_path: Path) -> None:
    a = _lines(50)
    b = [*a[:40], *_lines(50, tag="b")[40:]]
    ra = render([_journal(tmp_path, "a", a, "a1" * 16)], "short-iso", tmp_path / "a.log")
    rb = render([_journal(tmp_path, "b", b, "b2" * 16)], "json", tmp_path / "b.json")
    for first, second in ((ra, rb), (rb, ra)):
        db = tmp_path / f"{first.stem}.duckdb"
        _ingest(db, first)
        _ingest(db, second)
        assert _count(db) == 100


def test_merged_journal_beside_one_hosts_file_counts_each_entry_once(tmp_path: Path) -> None:
    """A merged two-host text journal prints a `-- Boot --` marker at each change of host,
    one host's file none: an unknown boot matches any, so the host's file is the merged
    one's on that host (`ingest journal.log prefill.log prefill.iso.log` failed outright)."""
    lines = sorted([*_lines(30, "prefill-0", "p"), *_lines(30, "decode-0", "d")],
                   key=lambda x: x[1])  # fmt: skip
    j = _journal(tmp_path, "both", lines, "c3" * 16)
    merged = render([j], "short", tmp_path / "journal.log")
    per_host = tmp_path / "prefill.log"
    per_iso = tmp_path / "prefill.iso.log"
    for fmt, out in (("short", per_host), ("short-iso", per_iso)):
        with open(out, "wb") as fh:
            subprocess.run(["journalctl", "--no-pager", "--all", "-o", fmt, f"--file={j}",
                            "_HOSTNAME=prefill-0"], stdout=fh, check=True,
                           env={"TZ": "UTC"})  # fmt: skip
    for order in ((merged, per_host, per_iso), (per_iso, per_host, merged)):
        db = tmp_path / f"{order[0].name}.duckdb"
        res = _ingest(db, *order)
        assert _count(db) == 60, _notes(res)
        assert _count(db, "host = 'prefill-0'") == 30


def test_a_journal_beside_journal_remotes_copy_is_one_by_identity(tmp_path: Path) -> None:
    """The same entries written twice by systemd-journal-remote: other files, other
    cursors, one identity (boot, monotonic and wall time, host, message)."""
    lines = _lines(30)
    one = _journal(tmp_path, "host", lines, "d4" * 16)
    two = _journal(tmp_path, "remote", lines, "d4" * 16)
    db = tmp_path / "r.duckdb"
    res = _ingest(db, one, two)
    assert _count(db) == 30
    assert any("same boot, monotonic and wall time" in n for n in _notes(res))
    # one changed monotonic clock: another boot's entries, whatever their text
    other = _journal(tmp_path, "other", lines, "d4" * 16, mono0=7)
    _ingest(db, other)
    assert _count(db) == 60


def test_identical_logs_are_merged_and_said_how_to_undo(tmp_path: Path) -> None:
    """Identical line for line over their common span (b goes on after a ends): no
    content can tell them apart, so they are merged, and said how to undo it."""
    lines = _lines(MIN_ENTRIES + 5)
    later = ("decode-0", 3_600_000_000, "one more line, an hour later")
    a = render([_journal(tmp_path, "a", lines, "e5" * 16)], "short", tmp_path / "a.log")
    b = render([_journal(tmp_path, "b", [*lines, later], "f6" * 16)], "short",
               tmp_path / "b.log")  # fmt: skip
    db = tmp_path / "i.duckdb"
    res = _ingest(db, a, b)
    assert _count(db) == len(lines) + 1  # outside the span: stays
    (note,) = [n for n in _notes(res) if "sources restore 2" in n]
    assert note.startswith(f"{len(lines)} entries of source 2 are source 1's")
    assert restore_source(db, 2)["restored"] == len(lines)
    assert _count(db) == 2 * len(lines) + 1
    assert _count(db, "source_id = 2") == len(lines) + 1


def test_dedupe_merges_a_pair_below_the_share_and_restore_undoes_it(tmp_path: Path) -> None:
    a = _lines(50)
    b = [*a[:40], *_lines(50, tag="b")[40:]]
    ra = render([_journal(tmp_path, "a", a, "a1" * 16)], "short-iso", tmp_path / "a.log")
    rb = render([_journal(tmp_path, "b", b, "b2" * 16)], "short-iso", tmp_path / "b.log")
    db = tmp_path / "d.duckdb"
    _ingest(db, ra, rb)
    assert dedupe_source(db, 2, 1)["dropped"] == 40
    assert _count(db) == 60
    assert restore_source(db, 2)["restored"] == 40
    assert _count(db) == 100


def test_cat_is_named_not_merged_and_dedupes_by_message_when_asked(tmp_path: Path) -> None:
    lines = _lines(30)
    j = _journal(tmp_path, "a", lines, "a1" * 16)
    db = tmp_path / "c.duckdb"
    _ingest(db, render([j], "export", tmp_path / "a.export"))
    res = _ingest(db, render([j], "cat", tmp_path / "a.cat"), host="decode-0")
    assert _count(db) == 60
    assert any("sources dedupe 2 --against 1" in n for n in _notes(res))
    assert dedupe_source(db, 2, 1)["dropped"] == 30
    assert _count(db) == 30


def test_json_lines_logs_without_journal_fields_are_never_one(tmp_path: Path) -> None:
    """Application logs of JSON lines with no MESSAGE or time: every key part is absent,
    and an entry without a time or message never matches (the second file was lost)."""
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text("".join(f'{{"event": "a{i}", "n": {i}}}\n' for i in range(50)))
    b.write_text("".join(f'{{"event": "b{i}", "n": {i}}}\n' for i in range(50)))
    db = tmp_path / "j.duckdb"
    _ingest(db, a, b, fmt="json")
    assert _count(db) == 100


def test_the_chain_keeps_pairs_in_both_orders_only() -> None:
    import numpy as np

    from forensics.store.alignment import gaps, longest_chain

    new = np.array([1, 2, 3, 4, 5])
    old = np.array([10, 30, 20, 40, 50])  # 2 and 3 cross: one of them goes
    kept = longest_chain(new, old)
    assert len(kept) == 4 and list(np.diff(old[kept]) > 0) == [True] * 3
    assert list(longest_chain(new[::-1], old[::-1])) != []  # unsorted input is sorted
    assert len(longest_chain(np.array([1, 2, 3]), np.array([3, 2, 1]))) == 1
    # between links (1,10) and (4,40): new 2,3 and old 20,30 free at one place
    (a, b), *_ = gaps(np.array([1, 4]), np.array([10, 40]), np.array([2, 3]),
                      np.array([20, 30]))  # fmt: skip
    assert list(a) == [2, 3] and list(b) == [20, 30]
    assert gaps(np.array([1, 4]), np.array([10, 40]), np.array([2]), np.array([20, 30])) == []


def test_a_folder_of_every_rendering_counts_each_entry_once(tmp_path: Path) -> None:
    """One two-host journal as a user may gather it: text renderings of every resolution,
    json, export, the binary .journal itself and per-host text files, in one folder: each
    entry once; `cat` (no time) named, not merged (it failed outright before)."""
    lines = sorted([*_lines(30, "prefill-0", "p"), *_lines(30, "decode-0", "d")],
                   key=lambda x: x[1])  # fmt: skip
    j = _journal(tmp_path, "both", lines, "c3" * 16)
    folder = tmp_path / "incident"
    folder.mkdir()
    for fmt in ("short", "short-iso", "short-iso-precise", "short-precise", "json", "export"):
        render([j], fmt, folder / f"all.{fmt}")
    (folder / "all.journal").write_bytes(j.read_bytes())
    for host in HOSTS:
        with open(folder / f"{host}.log", "wb") as fh:
            subprocess.run(["journalctl", "--no-pager", "--all", "-o", "short-iso", f"--file={j}",
                            f"_HOSTNAME={host}"], stdout=fh, check=True,
                           env={"TZ": "UTC"})  # fmt: skip
    render([j], "cat", folder / "all.cat")
    db = tmp_path / "f.duckdb"
    res = _ingest(db, folder, host="decode-0")
    assert _count(db, "source_id <> (SELECT source_id FROM sources WHERE format = 'cat')") == 60
    (cat,) = [s for s in res.sources if s.format == "cat"]
    assert cat.entries == 60
    assert any(f"sources dedupe {cat.source_id} --against" in n for n in _notes(res))


def test_plain_logs_of_one_name_in_two_pod_folders_stay_two(tmp_path: Path) -> None:
    """SGLang's stdout saved as sglang.log in two pods' folders (the host comes from the
    file name: the same for both), 40 of 50 lines alike in the same seconds; and two `cat`
    renderings given one --host: all kept, the pairs said."""
    lines = [f"[2026-11-29 07:00:{i // 10:02d}] Decode batch, #running-req: {i % 7}, "
             f"#token: {i}, token usage: 0.01, #queue-req: 0\n" for i in range(50)]  # fmt: skip
    other = [*lines[:40], *(ln.replace("#token:", "#token: 9") for ln in lines[40:])]
    for pod, text in (("pod-a", lines), ("pod-b", other)):
        (tmp_path / pod).mkdir()
        (tmp_path / pod / "sglang.log").write_text("".join(text))
    db = tmp_path / "p.duckdb"
    res = _ingest(db, tmp_path / "pod-a" / "sglang.log", tmp_path / "pod-b" / "sglang.log")
    assert _count(db) == 100
    assert any("repeats 80 % of source 1" in n for n in _notes(res))
    a = render([_journal(tmp_path, "a", _lines(50), "a1" * 16)], "cat", tmp_path / "a.cat")
    b = render([_journal(tmp_path, "b", [*_lines(50)[:40], *_lines(50, tag="b")[40:]],
                         "b2" * 16)], "cat", tmp_path / "b.cat")  # fmt: skip
    db2 = tmp_path / "c.duckdb"
    res = _ingest(db2, a, b, host="decode-0")
    assert _count(db2) == 100
    assert any("sources dedupe 2 --against 1" in n for n in _notes(res))


def test_sources_keyed_before_this_version_are_keyed_as_they_are_read(tmp_path: Path) -> None:
    """A catalog whose sources were stored with the old key (the whole identity's hash):
    their keys are computed from their columns, so a later rendering still finds them."""
    import duckdb

    lines = _lines(30)
    j = _journal(tmp_path, "a", lines, "a1" * 16)
    db = tmp_path / "old.duckdb"
    _ingest(db, render([j], "export", tmp_path / "a.export"))
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM meta WHERE key = 'entry_key_from'")  # as an older catalog
    con.close()
    shard = next((tmp_path / "old.shards" / "source_id=1").glob("entries-*.parquet"))
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * REPLACE (hash(message, 'old') AS key) FROM '{shard}') "
                f"TO '{shard}.new' (FORMAT parquet)")  # fmt: skip
    con.close()
    shard.with_name(shard.name + ".new").replace(shard)
    con = duckdb.connect(str(db))
    con.execute("UPDATE shards SET bytes = NULL, sha256 = NULL WHERE table_name = 'entries'")
    con.close()
    _ingest(db, render([j], "short-iso-precise", tmp_path / "a.log"))
    assert _count(db) == len(lines)
