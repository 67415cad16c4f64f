"""The writing commands as the API offers them: the store's own, handed the answers that
are stored with the data they write (the lines near each transfer). The store imports
nothing above it, so it is told what to derive; a call of the store's functions without
these leaves those rows stale, and they are computed as they are read."""

from __future__ import annotations

import os
from typing import Any

from .store.derived import Deriver


def derivers() -> tuple[Deriver, ...]:
    """The analyses' rows stored with every write."""
    from .analyses.suspects.stored import store_near

    return (store_near,)


def ingest(paths: list[str], db: str | os.PathLike | None = None, **kw: Any):
    """`forensics.store.ingest.ingest` with the stored answers (see its doc)."""
    from .store.ingest import ingest as store_ingest

    return store_ingest(paths, db, derivers=derivers(), **kw)


def remove_source(db: str | os.PathLike | None, source_id: int, **kw: Any) -> dict:
    from .store.sources import remove_source as remove

    return remove(db, source_id, derivers=derivers(), **kw)


def relabel_source(db: str | os.PathLike | None, source_id: int, **kw: Any) -> dict:
    from .store.sources import relabel_source as relabel

    return relabel(db, source_id, derivers=derivers(), **kw)


def restore_source(db: str | os.PathLike | None, source_id: int, **kw: Any) -> dict:
    from .store.sources import restore_source as restore

    return restore(db, source_id, derivers=derivers(), **kw)


def dedupe_source(db: str | os.PathLike | None, source_id: int, against: int, **kw: Any) -> dict:
    from .store.sources import dedupe_source as dedupe

    return dedupe(db, source_id, against, derivers=derivers(), **kw)


def rename_run(db: str | os.PathLike | None, old: str, new: str, **kw: Any) -> dict:
    from .store.runs import rename_run as rename

    return rename(db, old, new, derivers=derivers(), **kw)
