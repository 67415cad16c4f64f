"""Every way out works: a shard of garbage, a zeroed footer or a byte flipped inside the
footer (same size: the cheap check saw nothing) is named as damage by every command,
`verify` included, and `sources remove` removes it; a catalog moved without its shard
folder says so."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import duckdb
import pytest

import forensics
from forensics.store.integrity import _UNREADABLE
from forensics.store.sources import list_sources, remove_source

LINES = [b"2026-11-29T07:00:0%d.000001+0000 decode-0 python3[1]: ok %d\n" % (i, i)
         for i in range(1, 4)]  # fmt: skip


def _incident(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a.log").write_bytes(b"".join(LINES))
    (tmp_path / "b.log").write_bytes(b"2026-11-29T07:00:05.000001+0000 prefill-0 p[2]: x\n")
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(tmp_path / "a.log")], db)
    forensics.ingest([str(tmp_path / "b.log")], db)
    (shard,) = (tmp_path / "inc.shards" / "source_id=1").glob("entries-*.parquet")
    return db, shard


def _thrift_breaking_offset(shard: Path) -> int:
    """An offset inside the footer whose flipped byte no reader parses."""
    data = shard.read_bytes()
    footer = struct.unpack("<I", data[-8:-4])[0]
    probe = shard.with_name("probe.bin")
    try:
        for off in range(len(data) - 8 - footer, len(data) - 8):
            b = bytearray(data)
            b[off] ^= 0xFF
            probe.write_bytes(b)
            try:
                duckdb.sql(f"SELECT * FROM read_parquet('{probe}')").fetchall()
            except duckdb.Error as exc:
                if "Invalid data" in str(exc) or "thrift" in str(exc).lower():
                    return off
        raise AssertionError("no byte of the footer broke it")
    finally:
        probe.unlink(missing_ok=True)


@pytest.mark.parametrize("damage", ["garbage", "zeroed footer", "flipped footer byte"])
def test_a_damaged_shard_is_named_and_removed(tmp_path: Path, damage: str) -> None:
    db, shard = _incident(tmp_path)
    data = bytearray(shard.read_bytes())
    if damage == "garbage":
        data = bytearray(b"x" * len(data))
    elif damage == "zeroed footer":
        data[-8:] = bytes(8)
    else:
        data[_thrift_breaking_offset(shard)] ^= 0xFF
    _UNREADABLE.clear()  # as a fresh process finds it
    shard.write_bytes(data)
    v = forensics.verify(db)
    assert [b.path for b in v.damage.files] == [shard.relative_to(db.with_suffix(".shards"))
                                               .as_posix()]  # fmt: skip
    assert "Parquet" in v.damage.files[0].why
    listed = {s["source_id"]: s["damaged"] for s in list_sources(db)}
    assert listed[1] and listed[2] is None
    with pytest.raises(forensics.ForensicsError, match=r"source 1 .* is damaged: source_id=1"):
        forensics.report(db)
    assert remove_source(db, 1)["removed"]["entries"] == 3
    assert forensics.query("SELECT count(*) AS n FROM entries", db)["n"][0] == 1
    assert not shard.exists()


def test_a_catalog_moved_without_its_folder_says_so(tmp_path: Path) -> None:
    db, _ = _incident(tmp_path)
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    shutil.copy2(db, alone / db.name)
    with pytest.raises(forensics.ForensicsError,
                       match=r"the shard folder .*elsewhere/inc\.shards is missing: was the "
                             r"catalog moved without it\? `forensics mv` moves both"):  # fmt: skip
        forensics.report(alone / db.name)
    v = forensics.verify(alone / db.name)
    assert v.damage.folder_missing.endswith("elsewhere/inc.shards")


def test_an_interrupted_remove_keeps_every_registered_file(
    renderings: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the remove began giving another source back its dropped entries: the
    commit never came, so that source's registered `dropped_entries` file stays (it was
    deleted, and the catalog then named a missing file)."""
    from forensics.store import sources

    db = tmp_path / "x.duckdb"
    forensics.ingest([str(renderings["short"])], db, fmt="short", year=2026)
    forensics.ingest([str(renderings["export"])], db)  # richer: takes source 1's copies
    before = sorted(p.name for p in (tmp_path / "x.shards").rglob("*.parquet"))
    assert any(n.startswith("dropped_entries-") for n in before)

    def interrupted(*_a, **_k) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sources, "_changed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        remove_source(db, 2)
    monkeypatch.undo()
    after = {p.name for p in (tmp_path / "x.shards").rglob("*.parquet")}
    assert set(before) <= after  # every registered file is still there
    assert forensics.verify(db).damage.files == []
    kept = forensics.query("SELECT count(*) AS n FROM dropped_entries", db)["n"][0]
    assert kept == 14 and remove_source(db, 2)["restored"] == {1: kept}
