"""An incident copied or renamed as one: the catalog and its shard folder together.

`cp -a incident/ elsewhere/` (the whole folder) and `mv` of both files work too; these are
the documented way, and the only one for a catalog whose folder sits beside other
incidents: a copy of the catalog alone shares the original's shard folder (same stem)
and can never write (pairing.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson

from ..errors import ForensicsError
from .catalog import relocating
from .database import _connect, _install, db_path, transaction
from .intents import _clear_intent, _intent_file, _write_intent
from .pairing import MARK, mark_folder, new_identity
from .points import reached
from .shards import LOCK, STAGING, WRITER, folder


def _resuming(op: str, s: Path, d: Path) -> bool:
    """Whether this command finishes an interrupted one of the same pair."""
    f = _intent_file(d)
    if not f.exists():
        return False
    try:
        doc = orjson.loads(f.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return doc.get("op") == op and Path(doc.get("src", "")) == s and Path(doc.get("dst", "")) == d


def _targets(
    src: str | os.PathLike | None, dst: str | os.PathLike, op: str
) -> tuple[Path, Path, bool]:
    """(source catalog, destination catalog, whether an interrupted one is resumed)."""
    s = db_path(src).absolute()
    text = os.fspath(dst)
    d = Path(text).absolute()
    if d.is_dir() or text.endswith(("/", os.sep)):  # `copy DST/`: a folder
        d = d / s.name
    resume = _resuming(op, s, d)
    if not s.exists() and not (resume and op == "mv"):
        raise ForensicsError(f"no database at {s}: name one with --db PATH or FORENSICS_DB")
    root = folder(s.resolve()) if s.exists() else folder(s)
    if d.parent.resolve() == root.resolve() or root.resolve() in d.parent.resolve().parents:
        raise ForensicsError(f"{d} lies inside {root.name}, the shard folder it would copy: "
                             "choose a place outside it")  # fmt: skip
    if not resume:
        for p in (d, folder(d), d.with_name(d.name + ".wal")):
            if p.exists() or p.is_symlink():
                raise ForensicsError(f"{p} is in the way: choose another name")
    if folder(d.resolve()) == root:
        raise ForensicsError(f"{d} would share {folder(s).name} with {s}: choose another stem")
    return s, d, resume


def _skip(_dir: str, names: list[str]) -> list[str]:
    """Not copied: staging folders, locks, the folder's identity (the copy gets its own)."""
    return [n for n in names if n.startswith(STAGING) or n in (LOCK, WRITER, MARK)
            or n.endswith(".tmp")]  # fmt: skip


def copy_incident(
    src: str | os.PathLike | None,
    dst: str | os.PathLike,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> Path:
    """A copy of the incident at `dst` (a catalog path, or a folder to put it in: an
    existing one, or one named with a trailing slash) with a shard folder and an identity
    of its own: both read and write independently. A copy that was interrupted is made
    anew (its partial files first removed)."""
    s, d, resume = _targets(src, dst, "copy")
    made = _made_parents(d)
    root = folder(s.resolve())
    # the writer lock and the file's own held: nothing writes while the bytes are copied
    with relocating(s, root, wait, waiting):
        if resume:
            _remove_copy(d)
        _write_intent("copy", s, d)
        try:
            shutil.copy2(s, d)
            reached("copy-catalog-copied")
            wal = s.with_name(s.name + ".wal")
            if wal.exists():
                shutil.copy2(wal, d.with_name(d.name + ".wal"))
            if root.is_dir():
                # a link inside is copied as a link and never read: no shard is one
                shutil.copytree(root, folder(d), symlinks=True, ignore=_skip)
        except BaseException as exc:
            _remove_copy(d)
            _clear_intent(s, d)
            for p in made:
                with contextlib.suppress(OSError):
                    p.rmdir()  # only while empty
            _refused(exc, "copy", s, d)
            raise
        _own_identity(d)
        _clear_intent(s, d)
    return d


def _refused(exc: BaseException, what: str, s: Path, d: Path) -> None:
    """A copy or move the file system refused, taken back: one line saying so."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        raise ForensicsError(f"cannot {what} {s} to {d}: {exc.strerror}{where}; the incident "
                             f"stays at {s}, nothing is left at {d}") from None  # fmt: skip


def _remove_copy(d: Path) -> None:
    for p in (d, d.with_name(d.name + ".wal")):
        p.unlink(missing_ok=True)
    shutil.rmtree(folder(d), ignore_errors=True)


def _own_identity(catalog: Path) -> None:
    con = _connect(catalog, read_only=False, intent_ok=True)
    try:
        with transaction(con):
            mark = new_identity(con)
            _install(con, catalog)
    finally:
        con.close()
    mark_folder(folder(catalog.resolve()), mark, catalog)


def move_incident(
    src: str | os.PathLike | None,
    dst: str | os.PathLike,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> Path:
    """The incident renamed or moved: the catalog (and its .wal) and its shard folder (a
    link stays a link, a relative one rewritten for its new place). Readers already open
    keep reading the files they opened. Its intent is written first: a move killed midway
    is finished by running it again; one that fails (a full disk) is undone."""
    s, d, _ = _targets(src, dst, "mv")
    made = _made_parents(d)
    root = folder(s)
    held = folder(s.resolve()) if s.exists() or not folder(d).exists() else folder(d)
    with relocating(s, held, wait, waiting) as cat:
        cat.release_file()  # held until now: no writer meanwhile; the file moves next
        pairs = ((s, d), (s.with_name(s.name + ".wal"), d.with_name(d.name + ".wal")))
        moved: list[tuple[Path, Path]] = []
        try:
            _write_intent("mv", s, d)
            for a, b in pairs:
                if a.exists():
                    shutil.move(a, b)
                    moved.append((a, b))
            reached("mv-catalog-moved")
            if root.exists() or root.is_symlink():
                _move_folder(root, folder(d))
        except BaseException as exc:
            _undo_move(pairs, moved, root, d, made)
            _clear_intent(s, d)
            _refused(exc, "move", s, d)
            raise
        _clear_intent(s, d)
    return d


def _made_parents(d: Path) -> list[Path]:
    """The destination's folders, made: those that were not there, deepest first."""
    missing = [p for p in (d.parent, *d.parent.parents) if not p.exists()]
    d.parent.mkdir(parents=True, exist_ok=True)
    return missing


def _undo_move(
    pairs: tuple[tuple[Path, Path], ...],
    moved: list[tuple[Path, Path]],
    root: Path,
    d: Path,
    made: list[Path],
) -> None:
    """A move that failed (a full disk, no permission) taken back: what moved goes back,
    and nothing it wrote stays at the destination — a file copied in part across file
    systems, the shard folder's partial copy, the folders it made."""
    for a, b in reversed(moved):
        with contextlib.suppress(OSError):
            shutil.move(b, a)
    for a, b in pairs:
        if a.exists() and (b.exists() or b.is_symlink()):  # its copy broke off midway
            with contextlib.suppress(OSError):
                b.unlink()
    if root.exists():  # a partial copy across file systems
        shutil.rmtree(folder(d), ignore_errors=True)
    with contextlib.suppress(OSError):  # a folder of that name is not ours
        _intent_file(d).unlink(missing_ok=True)
    for p in made:
        with contextlib.suppress(OSError):
            p.rmdir()  # only while empty


def _move_folder(root: Path, to: Path) -> None:
    """The shard folder moved; a relative link to it rewritten to point where it did."""
    if root.is_symlink() and not os.path.isabs(target := os.readlink(root)):
        where = os.path.normpath(os.path.join(root.parent, target))
        to.symlink_to(os.path.relpath(where, to.parent))
        root.unlink()
        return
    shutil.move(root, to)
