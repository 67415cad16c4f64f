"""The folder knows its catalog: a byte copy of the catalog beside the original (which
shares its shard folder) reads, and writes and deletes nothing there; a catalog renamed
(the one the folder names is gone) writes, and the folder is marked with its new name."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

import forensics
from forensics.errors import ForensicsError
from forensics.store.sources import remove_source

from . import corpus


def _incident(renderings: dict[str, Path], tmp_path: Path) -> Path:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(renderings["export"])], db)
    return db


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*.parquet")}


def test_a_copy_beside_the_original_deletes_none_of_its_files(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    db = _incident(renderings, tmp_path)
    shards = tmp_path / "inc.shards"
    before = _files(shards)
    bak = tmp_path / "inc.bak"
    shutil.copy2(db, bak)
    with pytest.raises(ForensicsError, match=r"inc\.bak is read-only here: .*is a copy of it"):
        remove_source(bak, 1)
    assert _files(shards) == before
    assert forensics.verify(db).damage.files == []  # the original is whole
    rows = forensics.query("SELECT count(*) AS n FROM entries", bak)["n"][0]
    assert rows == len(corpus.expected())  # the copy reads


def test_a_renamed_catalog_writes_and_the_folder_names_it(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    db = _incident(renderings, tmp_path)
    renamed = tmp_path / "inc.db"  # same stem: the same shard folder
    db.rename(renamed)
    assert remove_source(renamed, 1)["removed"]["entries"] == len(corpus.expected())
    mark = orjson.loads((tmp_path / "inc.shards" / ".identity").read_bytes())
    assert mark["catalog"] == "inc.db"


def test_a_comma_in_the_incidents_path_is_refused_in_one_line(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    import subprocess
    import sys

    where = tmp_path / "a,b"
    where.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "forensics", "ingest", str(renderings["export"]),
         "--db", str(where / "inc.duckdb")], capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode != 0
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot hold a ','" in line and "a,b" in line
    assert not (where / "inc.duckdb").exists()


def test_an_ingest_opens_one_catalog_and_checks_it_at_most_twice(
    renderings: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one writer (store/catalog.py): one connection to the catalog per ingest, the
    first and the next; integrity checked at open and after the moves, not by each step
    (it was 5 times an ingest)."""
    import sys

    from forensics.store import database, integrity

    counts = {"connections": 0, "checks": 0}
    real_connect, real_check = database._connect, integrity.check

    def connecting(*a, **k):
        counts["connections"] += 1
        return real_connect(*a, **k)

    def checking(*a, **k):
        counts["checks"] += 1
        return real_check(*a, **k)

    monkeypatch.setattr(database, "_connect", connecting)
    for name, mod in list(sys.modules.items()):
        if name.startswith("forensics.store") and getattr(mod, "check", None) is real_check:
            monkeypatch.setattr(mod, "check", checking)
    db = tmp_path / "one.duckdb"
    for path, fmt in ((renderings["export"], None), (renderings["short"], "short")):
        counts.update(connections=0, checks=0)
        forensics.ingest([str(path)], db, fmt=fmt, year=2026)
        assert counts == {"connections": 1, "checks": 2}, (path.name, counts)


def test_a_half_written_mark_of_a_dead_writer_is_swept(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    """A writer killed while it wrote the folder's mark leaves `.identity.PID.tmp`: the
    next writer removes it (a live writer's is left alone)."""
    import os

    db = _incident(renderings, tmp_path)
    shards = tmp_path / "inc.shards"
    dead = shards / ".identity.999999999.tmp"  # no such process
    live = shards / f".identity.{os.getppid()}.tmp"
    for f in (dead, live):
        f.write_bytes(b'{"identity": "half')
    forensics.ingest([str(renderings["json"])], db)
    assert not dead.exists() and live.exists()
    live.unlink()


def test_an_unmarked_folder_beside_another_catalog_is_never_swept(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    """A folder with no mark (a catalog from before marks) holds source folders: a new
    catalog of the same stem beside that catalog refuses to write there instead of
    sweeping them as a killed first ingest's."""
    import subprocess
    import sys

    db = _incident(renderings, tmp_path)
    (tmp_path / "inc.shards" / ".identity").unlink()  # as a catalog before marks left it
    before = _files(tmp_path / "inc.shards")
    other = tmp_path / "inc.db"
    proc = subprocess.run([sys.executable, "-m", "forensics", "ingest", str(renderings["json"]),
                           "--db", str(other)], capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 2 and "another catalog's files" in proc.stderr
    assert _files(tmp_path / "inc.shards") == before
    assert db.exists()
