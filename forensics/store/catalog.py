"""The write side's one face, the twin of the read scope (forensics/scope.py): a writing
command opens one Catalog (as datasette's `Database` owns its connections) under the
incident's writer lock, and every step of its write takes it.

It holds the catalog's path and shard folder, the one writable connection, whether this
command made the catalog, and the damage seen: integrity is checked once at open and once
after the command moved files in (`recheck`), never again by each step; the views are
installed from that damage, not from a check of their own. It commits with the folder's
mark (`committing`). The store below it imports nothing above it: what the analyses
derive is handed to the commands that refresh it. A copy or a move holds the incident
the same way (`relocating`: the locks, nothing checked); `upgrade`, which must open a
catalog no Catalog can be (an older schema), takes the writer lock itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import duckdb

from .database import _connect, _install, committing, db_path, folder, open_writer
from .integrity import Damage, check
from .shards import writer_lock


@dataclass
class Catalog:
    path: Path
    root: Path
    con: duckdb.DuckDBPyConnection | None  # None: a move's catalog already moved
    made: bool  # this command made the catalog (it removes it if it fails)
    damage: Damage
    held: ExitStack | None = None  # the writer lock and the connection, closed in turn

    def recheck(self) -> Damage:
        """The integrity check again, after files moved in or out."""
        self.damage = check(self.con, self.root)
        return self.damage

    def install(self, named: bool = True) -> None:
        """The views over the sound sources' files (as last checked); `named`: the named
        queries' too."""
        _install(self.con, self.path, skip=self.damage.sources, named=named)

    def committing(self):
        """All or nothing, the next generation stamped and the folder marked after."""
        return committing(self.con)

    def release_file(self) -> None:
        """The catalog file let go, the writer lock kept (a move renames the file)."""
        if self.con is not None:
            self.con.close()

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held = None

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def open_catalog(
    path: str | os.PathLike | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    views: str = "all",
) -> Catalog:
    """The catalog held for writing (made if it is new) under the writer lock, checked
    once, its views installed (`views`: "all", "tables" or "none"). Close it (or use it
    as a context manager): the connection, then the lock."""
    p = db_path(path)
    held = ExitStack()
    held.enter_context(writer_lock(folder(p.absolute()), wait, waiting))
    try:
        con, made = open_writer(p, wait, waiting, views="none")
    except BaseException:
        held.close()
        raise
    held.callback(con.close)
    try:
        root = folder(p.resolve())
        cat = Catalog(p, root, con, made, check(con, root), held=held)
        if views != "none":
            cat.install(named=views == "all")
    except BaseException:
        held.close()
        raise
    return cat


def relocating(
    path: Path,
    lock: Path,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> Catalog:
    """The incident held for a copy or a move: the writer lock (on `lock`, the shard
    folder that holds it) and the catalog file's own lock, nothing made, migrated or
    checked — a read-only copy of a catalog is what `copy` is for, and a move's catalog
    may be gone already (an interrupted move being finished)."""
    held = ExitStack()
    held.enter_context(writer_lock(lock, wait, waiting))
    con = None
    try:
        if path.exists():
            con = _connect(path, read_only=False, wait=wait, waiting=waiting, intent_ok=True)
            held.callback(con.close)
    except BaseException:
        held.close()
        raise
    return Catalog(path, folder(path.absolute()), con, False, Damage(), held=held)
