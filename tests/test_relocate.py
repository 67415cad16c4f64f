"""copy and mv recoverable: a move writes its intent beside the source and the destination
first, a copy beside the destination alone (a copy never changes its source); a kill -9
midway leaves what any command names with the way to finish, and a rerun finishes it; a
failed move is undone and leaves nothing at the destination; `copy DST/` is a folder; a copy into its own
shard folder is refused; a relative link to the shard folder is rewritten for its new
place."""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

import pytest

import forensics
from forensics.store import relocate

from .helpers import cli, held_at


def _incident(renderings: dict[str, Path], where: Path) -> Path:
    db = where / "inc.duckdb"
    where.mkdir(parents=True, exist_ok=True)
    forensics.ingest([str(renderings["export"])], db)
    return db


def _entries(db: Path) -> int:
    return forensics.query("SELECT count(*) AS n FROM entries", db)["n"][0]


def _killed_at(point: str, *args: str) -> None:
    """`forensics ARGS` held at `point` (forensics/store/points.py), then killed -9."""
    _cut_at(point, signal.SIGKILL, *args)


def test_a_move_killed_midway_is_named_at_both_places_and_finished(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    src = _incident(renderings, tmp_path / "a")
    n = _entries(src)
    dst = tmp_path / "b" / "moved.duckdb"
    _killed_at("mv-catalog-moved", "mv", str(dst), "--db", str(src))
    assert dst.exists() and not src.exists()  # split: the catalog went, the folder not
    for where in (src, dst):
        r = cli("report", "--db", str(where))
        assert r.returncode == 2
        assert f"a move of {src} to {dst} was interrupted: rerun `forensics mv {dst} --db " \
               f"{src}` to finish" in r.stderr.decode()  # fmt: skip
    i = cli("ingest", str(renderings["json"]), "--db", str(src))
    assert i.returncode == 2 and b"was interrupted" in i.stderr  # never a new catalog there
    assert not src.exists()
    done = cli("mv", str(dst), "--db", str(src))
    assert done.returncode == 0, done.stderr
    assert _entries(dst) == n
    assert not (tmp_path / "a" / "inc.shards").exists()
    assert forensics.verify(dst).damage.files == []


def test_a_copy_killed_midway_is_never_opened_and_is_made_anew(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    src = _incident(renderings, tmp_path / "a")
    dst = tmp_path / "c" / "copy.duckdb"
    _killed_at("copy-catalog-copied", "copy", str(dst), "--db", str(src))
    r = cli("report", "--db", str(dst))
    assert r.returncode == 2 and b"a copy of" in r.stderr and b"was interrupted" in r.stderr
    # a copy never changes its source: every command there works as before
    for args in (("verify",), ("report",), ("ingest", str(renderings["json"]))):
        there = cli(*args, "--db", str(src))
        assert there.returncode == 0 and b"interrupted" not in there.stderr, (args, there.stderr)
    again = cli("copy", str(dst), "--db", str(src))
    assert again.returncode == 0, again.stderr
    assert _entries(dst) == _entries(src)
    assert cli("sources", "remove", "1", "--db", str(dst)).returncode == 0  # its own folder
    assert forensics.verify(src).damage.files == []


def test_a_failed_move_is_undone(
    renderings: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk midway (the folder's copy across file systems): the catalog goes back,
    no partial copy is left at the destination, and the source works."""
    src = _incident(renderings, tmp_path / "a")
    dst = tmp_path / "b" / "moved.duckdb"

    def full(root: Path, to: Path) -> None:
        shutil.copytree(root, to)  # part of it written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(to))

    monkeypatch.setattr(relocate, "_move_folder", full)
    with pytest.raises(forensics.ForensicsError, match="No space left on device"):
        relocate.move_incident(src, dst)
    assert src.exists() and not dst.exists() and not (tmp_path / "b" / "moved.shards").exists()
    assert _entries(src) > 0


def test_a_move_whose_catalog_does_not_fit_leaves_nothing_at_the_destination(
    renderings: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's own copy across file systems breaks off on a full disk: the part
    written goes, and so do the folders the move made."""
    src = _incident(renderings, tmp_path / "a")
    dst = tmp_path / "small" / "disk" / "inc.duckdb"
    real = shutil.move

    def full(a, b):
        if Path(b) == dst:
            Path(b).write_bytes(Path(a).read_bytes()[:4096])  # part of it, then no space
            raise OSError(errno.ENOSPC, "No space left on device", str(b))
        return real(a, b)

    monkeypatch.setattr(shutil, "move", full)
    with pytest.raises(forensics.ForensicsError, match="nothing is left at"):
        relocate.move_incident(src, dst)
    assert not (tmp_path / "small").exists()
    assert src.exists() and _entries(src) > 0 and forensics.verify(src).damage.files == []


def test_a_move_the_destination_refuses_leaves_the_source_as_it_was(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    src = _incident(renderings, tmp_path / "a")
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / "inc.duckdb.relocating").mkdir()  # the intent cannot be written there
    m = cli("mv", str(closed / "inc.duckdb"), "--db", str(src))
    assert m.returncode == 2 and m.stderr.count(b"\n") == 1 and b"unexpected" not in m.stderr
    assert b"nothing is left at" in m.stderr
    assert sorted(p.name for p in closed.iterdir()) == ["inc.duckdb.relocating"]
    assert forensics.verify(src).damage.files == [] and _entries(src) > 0


def test_copy_into_a_folder_named_with_a_slash_and_never_into_its_own_shards(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    src = _incident(renderings, tmp_path / "a")
    r = cli("copy", f"{tmp_path / 'new'}/", "--db", str(src))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "new" / "inc.duckdb").is_file()
    inside = cli("copy", str(tmp_path / "a" / "inc.shards" / "x.duckdb"), "--db", str(src))
    assert inside.returncode == 2
    assert b"lies inside inc.shards" in inside.stderr and inside.stderr.count(b"\n") == 1


def test_a_relative_link_to_the_shard_folder_is_rewritten(
    renderings: dict[str, Path], tmp_path: Path
) -> None:
    src = _incident(renderings, tmp_path / "a")
    store = tmp_path / "disk" / "inc.shards"
    store.parent.mkdir()
    shutil.move(tmp_path / "a" / "inc.shards", store)
    (tmp_path / "a" / "inc.shards").symlink_to(os.path.relpath(store, tmp_path / "a"))
    n = _entries(src)
    dst = tmp_path / "deeper" / "still" / "moved.duckdb"
    m = cli("mv", str(dst), "--db", str(src))
    assert m.returncode == 0, m.stderr
    link = dst.with_suffix(".shards")
    assert link.is_symlink() and not os.path.isabs(os.readlink(link))
    assert link.resolve() == store.resolve()
    assert _entries(dst) == n


@pytest.mark.parametrize("point", ["source-moved-in", "registered", "committed"])
def test_a_first_ingest_killed_anywhere_leaves_a_folder_the_next_command_repairs(
    renderings: dict[str, Path], tmp_path: Path, point: str
) -> None:
    """kill -9 of a first ingest after its source folder was renamed in, before or after
    its commit: the next ingest writes (it was read-only for ever: "holds another
    catalog's files"), and the folder equals a clean run's."""
    db = tmp_path / "inc.duckdb"
    _killed_at(point, "ingest", str(renderings["export"]), "--db", str(db))
    again = cli("ingest", str(renderings["export"]), "--db", str(db))
    assert again.returncode == 0, again.stderr
    clean = tmp_path / "clean" / "inc.duckdb"
    clean.parent.mkdir()
    forensics.ingest([str(renderings["export"])], clean)
    assert _entries(db) == _entries(clean)
    assert forensics.verify(db).damage.files == []
    shards = db.with_suffix(".shards")
    assert sorted(p.name for p in shards.iterdir()) == sorted(
        p.name for p in clean.with_suffix(".shards").iterdir()
    )  # no leftover: no unlisted source folder, no half-written mark


def _state(db: Path) -> tuple:
    """What a user sees of an incident: its sources (id, host of their entries) and
    entries, and that every registered file is whole."""
    rows = forensics.query("SELECT source_id, host, count(*) AS n FROM entries GROUP BY ALL "
                           "ORDER BY ALL", db).rows()  # fmt: skip
    return tuple(rows), forensics.verify(db).damage.files == []


WRITES = {  # a writing command, with the points it passes
    "ingest": (["ingest", "{json}"], ["catalog-opened", "source-moved-in", "registered",
                                      "committed"]),
    "remove": (["sources", "remove", "2"], ["remove-unlisted", "committed"]),
    "relabel": (["sources", "relabel", "1", "--host", "other"], ["relabel-rewritten",
                                                                 "committed"]),
}  # fmt: skip


@pytest.mark.slow  # a kill sweep: the newest set runs it
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
@pytest.mark.parametrize(("command", "point"),
                         [(c, p) for c, (_, ps) in WRITES.items() for p in ps])  # fmt: skip
def test_a_write_cut_at_any_point_leaves_the_incident_as_before_or_after(
    renderings: dict[str, Path], tmp_path: Path, command: str, point: str, how: int
) -> None:
    """kill -9 or Ctrl-C at every named point of ingest, remove and relabel: the next
    command finds the incident whole and as before the write (cut before its commit) or
    as after it (cut after), and the write run again ends as a clean run ends."""

    def made(where: Path) -> Path:
        db = where / "inc.duckdb"
        where.mkdir()
        forensics.ingest([str(renderings["export"])], db)
        forensics.ingest([str(renderings["short-iso"])], db, run="text", year=2026)
        return db

    args = [a.replace("{json}", str(renderings["json"])) for a in WRITES[command][0]]
    clean = made(tmp_path / "clean")
    before = _state(clean)
    assert cli(*args, "--db", str(clean)).returncode == 0
    after = _state(clean)
    db = made(tmp_path / "cut")
    _cut_at(point, how, *args, "--db", str(db))
    assert _state(db) in (before, after)
    again = cli(*args, "--db", str(db))
    assert _state(db) == after, again.stderr
    leftovers = sorted(p.name for p in db.with_suffix(".shards").rglob("*")
                       if p.name.endswith(".tmp") or p.name.startswith(".ingest-"))  # fmt: skip
    assert leftovers == []


def _cut_at(point: str, how: int, *args: str) -> None:
    """`forensics ARGS` held at `point`, then killed -9, or sent Ctrl-C and let go on (the
    interrupt lands in the write)."""
    proc, resume_w = held_at(point, *args)
    proc.send_signal(how)
    if how == signal.SIGINT:
        os.write(resume_w, b"x")
    _, err = proc.communicate(timeout=300)
    os.close(resume_w)
    if how == signal.SIGINT:
        assert proc.returncode == 130 and err.count(b"\n") == 1, err
