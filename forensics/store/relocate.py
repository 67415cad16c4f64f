"""An incident copied or renamed as one: the catalog and its shard folder together.

`cp -a incident/ elsewhere/` (the whole folder) and `mv` of both files work too; these are
the documented way, and the only one for a catalog whose folder sits beside other
incidents: a copy of the catalog alone shares the original's shard folder (same stem)
and can never write (pairing.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from ..errors import ForensicsError
from .database import _connect, _install, connect_read_only, db_path, transaction
from .pairing import MARK, mark_folder, new_identity
from .shards import LOCK, STAGING, WRITER, folder, writer_lock


def _targets(src: str | os.PathLike | None, dst: str | os.PathLike) -> tuple[Path, Path]:
    s, d = db_path(src), Path(dst)
    if not s.exists():
        raise ForensicsError(f"no database at {s}: name one with --db PATH or FORENSICS_DB")
    if d.is_dir():
        d = d / s.name
    for p in (d, folder(d), d.with_name(d.name + ".wal")):
        if p.exists() or p.is_symlink():
            raise ForensicsError(f"{p} is in the way: choose another name")
    if folder(d.resolve()) == folder(s.resolve()):
        raise ForensicsError(f"{d} would share {folder(s).name} with {s}: choose another stem")
    return s, d


def _skip(_dir: str, names: list[str]) -> list[str]:
    """Not copied: staging folders, locks, the folder's identity (the copy gets its own)."""
    return [n for n in names if n.startswith(STAGING) or n in (LOCK, WRITER, MARK)
            or n.endswith(".tmp")]  # fmt: skip


def copy_incident(src: str | os.PathLike | None, dst: str | os.PathLike) -> Path:
    """A copy of the incident at `dst` (a catalog path, or a folder to put it in) with a
    shard folder and an identity of its own: both read and write independently."""
    s, d = _targets(src, dst)
    d.parent.mkdir(parents=True, exist_ok=True)
    root = folder(s.resolve())
    try:
        with writer_lock(root):
            con = connect_read_only(s)  # held: no writer commits while the bytes are copied
            try:
                shutil.copy2(s, d)
                wal = s.with_name(s.name + ".wal")
                if wal.exists():
                    shutil.copy2(wal, d.with_name(d.name + ".wal"))
                if root.is_dir():
                    # a link inside is copied as a link and never read: no shard is one
                    shutil.copytree(root, folder(d), symlinks=True, ignore=_skip)
            finally:
                con.close()
        _own_identity(d)
    except BaseException:
        for p in (d, d.with_name(d.name + ".wal")):
            p.unlink(missing_ok=True)
        shutil.rmtree(folder(d), ignore_errors=True)
        raise
    return d


def _own_identity(catalog: Path) -> None:
    con = _connect(catalog, read_only=False)
    try:
        with transaction(con):
            mark = new_identity(con)
            _install(con, catalog)
    finally:
        con.close()
    mark_folder(folder(catalog.resolve()), mark, catalog)


def move_incident(src: str | os.PathLike | None, dst: str | os.PathLike) -> Path:
    """The incident renamed or moved: the catalog (and its .wal) and its shard folder (a
    link stays a link). Readers already open keep reading the files they opened."""
    s, d = _targets(src, dst)
    d.parent.mkdir(parents=True, exist_ok=True)
    root = folder(s)
    with writer_lock(folder(s.resolve())):
        con = _connect(s, read_only=False)  # the file's lock: no other writer meanwhile
        con.close()
        moved: list[tuple[Path, Path]] = []
        try:
            for a, b in ((s, d), (s.with_name(s.name + ".wal"), d.with_name(d.name + ".wal"))):
                if a.exists():
                    shutil.move(a, b)
                    moved.append((a, b))
            if root.exists() or root.is_symlink():
                shutil.move(root, folder(d))
        except BaseException:
            for a, b in reversed(moved):
                with contextlib.suppress(OSError):
                    shutil.move(b, a)
            raise
    return d
