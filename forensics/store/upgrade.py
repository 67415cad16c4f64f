"""`forensics upgrade`: a database written by an older pd-forensics brought up to this
schema. A catalog is migrated in place (database.py); one of schema 6 or older, which kept
every row in the file, is written anew as a catalog and shards (legacy.py). Opening a
database never upgrades it: a writer that finds an old one raises `Legacy`, and ingest
calls this first."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..errors import ForensicsError
from .database import (
    SCHEMA_VERSION,
    Legacy,
    _check,
    _connect,
    _install,
    _version,
    db_path,
    folder,
)
from .shards import writer_lock


def upgrade(
    path: str | os.PathLike | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Bring a database written by an older pd-forensics up to this schema: (from, to).
    One of schema 6 or older is written anew as a catalog and shards (legacy.py); the old
    file is kept beside it as `<name>.v<version>`. Under the incident's writer lock, as
    every writer (an older catalog cannot be opened as a Catalog: this is its way in)."""
    p = db_path(path)
    if not p.exists():
        raise ForensicsError(f"no database at {p}: name one with --db PATH or FORENSICS_DB")
    with writer_lock(folder(p.absolute()), wait, waiting):
        return _upgrade(p)


def _upgrade(p: Path) -> tuple[int, int]:
    con = _connect(p, read_only=False)
    try:
        before = _version(con)
        try:
            _check(con, p, writable=True)
        except Legacy:
            from .legacy import convert  # the whole ingest path: only for old databases

            con.close()
            convert(p)
            return before or SCHEMA_VERSION, SCHEMA_VERSION
        _install(con, p)
    finally:
        con.close()
    return before or SCHEMA_VERSION, SCHEMA_VERSION
