"""The catalog (the .duckdb file): its schema and version, connections, and small helpers.

The catalog holds runs, sources, the shard files registered for them, the views that read
those files (forensics/store/shards.py) and the named queries' stored rows. A database of
schema 6 or older held every row in DuckDB tables: `forensics upgrade` (legacy.py) writes
it anew as a catalog and shards."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ..errors import ForensicsError
from ..parsers import tables
from ..parsers.tables import PATTERN_TABLES
from .derived import install_views
from .intents import interrupted
from .pairing import check_writable, mark_folder, new_identity, reading_note, stamp
from .points import reached
from .version import SCHEMA_VERSION

# The first schema of a catalog and shards: a catalog of it or later is migrated in place
# (CATALOG_MIGRATIONS), one before it written anew (legacy.py).
CATALOG_VERSION = 7
# The last schema that kept sources' rows in the .duckdb file (legacy.py reads it).
LEGACY_VERSION = 6
# Tables added by a version: created by its migration, then filled from the stored
# entries (`reread`), so a database ingested before holds what a new ingest would.
NEW_TABLES = {5: ["req_stats", "request_meta", "events"], 6: ["scheduler_status"]}
# How a database of an older version becomes schema 6 in place (each step one
# transaction); legacy.py then writes it out as a catalog and shards.
MIGRATIONS = {
    2: ["ALTER TABLE results ADD COLUMN status VARCHAR"],  # 3: the harness's request status
    3: [  # 4: a step's batch as text (a list column cost more to store than the rest)
        # an empty list as '' (DuckDB 1.4's array_to_string gives NULL for it, 2.0 '')
        *(
            f"ALTER TABLE steps ALTER COLUMN {c} TYPE VARCHAR USING CASE WHEN {c} IS NULL "
            f"THEN NULL WHEN len({c}) = 0 THEN '' ELSE array_to_string({c}, ',') END"
            for c in ("rids", "rooms")
        ),
    ],
    4: [PATTERN_TABLES[t].ddl() for t in NEW_TABLES[5]],  # 5: stock SGLang's evidence
    5: [PATTERN_TABLES[t].ddl() for t in NEW_TABLES[6]],  # 6: scheduler.status snapshots
}
DEFAULT_DB = "forensics.duckdb"
# Every command but ingest (which sets its own, below): DuckDB spills beyond it.
MEMORY_LIMIT = os.environ.get("FORENSICS_MEMORY_LIMIT", "1GB")
# DuckDB's share while ingest streams batches: the parsers hold a few hundred MB beside
# it, and the whole process stays under 1 GB at any input size with this (3 GB: 923 MB
# peak RSS; with 1 GB for DuckDB, 1,236 MB), at no measured cost in time.
INGEST_MEMORY_LIMIT = os.environ.get("FORENSICS_MEMORY_LIMIT", "320MB")
# The whole-source steps after (rejoin, dedupe): what the parsers held is still mapped
# (RSS), so DuckDB gets half of 1 GB; dedupe works in passes to fit (a 3 GB source that
# repeats a stored 742 MB one: 1,302 MB peak RSS with 1 GB here, in one pass).
WHOLE_SOURCE_MEMORY_LIMIT = os.environ.get("FORENSICS_MEMORY_LIMIT", "512MB")

# Every table is declared once, in parsers/tables.py: the DDL derives from it.
DDL = tables.ddl()
ENTRY_COLUMNS = tables.ENTRIES.names
# A reader waits this long for a writer registering sources (seconds; registration is
# short: the catalog is not held while inputs are read).
READ_WAIT = float(os.environ.get("FORENSICS_READ_WAIT", "60"))


def db_path(path: str | os.PathLike | None) -> Path:
    return Path(path or os.environ.get("FORENSICS_DB") or DEFAULT_DB)


def _connect(
    path: Path,
    read_only: bool,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    intent_ok: bool = False,
) -> duckdb.DuckDBPyConnection:
    """A connection; while another process holds the file's lock, retried for up to
    `wait` seconds (`waiting` is called once, when the wait begins). Refused where a copy
    or move of the catalog was interrupted (`intent_ok`: the copy or move itself)."""
    _searchable(path)
    if not intent_ok and (line := interrupted(path)) is not None:
        raise ForensicsError(line)
    deadline = time.monotonic() + wait
    pause = 0.05
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" not in text.lower():
                first = text.splitlines()[0]
                raise ForensicsError(f"cannot open database {path}: {first}") from None
            if time.monotonic() >= deadline:
                how = (f" (waited {wait:g} s)" if wait
                       else "" if read_only else " (--wait SECONDS waits for it)")  # fmt: skip
                raise Locked(f"database {path} is locked by another process{how}") from None
            if waiting is not None:
                waiting()
                waiting = None
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 1.0)
        except duckdb.Error as exc:
            first = str(exc).splitlines()[0]
            raise ForensicsError(f"cannot open database {path}: {first}") from None
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    # the stored views name their shards relative to the shard folder
    con.execute("SET file_search_path = ?", [str(folder(path.resolve()))])
    return con


def _searchable(path: Path) -> None:
    """DuckDB's file_search_path is a comma-separated list: a shard folder whose path holds
    a comma would be read as two folders, and every view would fail."""
    if "," in str(folder(path.resolve())):
        raise ForensicsError(f"{path}: an incident's path cannot hold a ',' (DuckDB reads "
                             "its shard folder's path as a list); move it, or give --db a "
                             "path without one")  # fmt: skip


class Locked(ForensicsError):
    """Another process holds the catalog (and `wait` ran out)."""


def catalog_path(con: duckdb.DuckDBPyConnection) -> Path:
    """The catalog file a connection is open on."""
    row = first_row(
        con, "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    )
    if not row or not row[0]:
        raise ForensicsError("an in-memory database holds no incident (give a file)")
    return Path(row[0]).resolve()


def shard_root(con: duckdb.DuckDBPyConnection) -> Path:
    """The shard folder beside the connection's catalog."""
    return folder(catalog_path(con))


def _version(con: duckdb.DuckDBPyConnection) -> int | None:
    has_meta = scalar(
        con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
    )
    if not has_meta:
        return None
    row = first_row(con, "SELECT value FROM meta WHERE key = 'schema_version'")
    return int(row[0]) if row else None


SHARD_SUFFIX = ".shards"


def folder(catalog: Path) -> Path:
    """The shard folder of a catalog file (`x.duckdb` -> `x.shards`)."""
    return catalog.with_name(catalog.stem + SHARD_SUFFIX)


def _check(con: duckdb.DuckDBPyConnection, path: Path, writable: bool = False) -> None:
    v = _version(con)
    if v == SCHEMA_VERSION:
        return
    if v is not None and CATALOG_VERSION <= v < SCHEMA_VERSION:
        if writable:
            migrate_catalog(con, path, v)
            return
        raise ForensicsError(
            f"{path} has schema version {v}, this pd-forensics reads {SCHEMA_VERSION}: "
            "`forensics upgrade` brings it up to date (a few seconds, nothing is lost)"
        )
    if v is None:
        raise ForensicsError(f"{path} is not a pd-forensics database (no schema version)")
    if v < CATALOG_VERSION and all(k in MIGRATIONS for k in range(v, LEGACY_VERSION)):
        if writable:
            raise Legacy(path, v)
        raise ForensicsError(
            f"{path} has schema version {v}, this pd-forensics reads {SCHEMA_VERSION}: "
            "`forensics upgrade` brings it up to date (a few seconds, nothing is lost)"
        )
    hint = "a newer pd-forensics" if v > SCHEMA_VERSION else "an older pd-forensics"
    raise ForensicsError(
        f"{path} has schema version {v}, this pd-forensics reads {SCHEMA_VERSION}: "
        f"it was written by {hint}; re-ingest into a new file"
    )


class Legacy(ForensicsError):
    """A writable open found a database that keeps its rows in the file: `forensics
    upgrade` (upgrade.py) writes it anew; an ingest calls it first by itself."""

    def __init__(self, path: Path, version: int) -> None:
        super().__init__(
            f"{path} has schema version {version}, this pd-forensics reads "
            f"{SCHEMA_VERSION}: `forensics upgrade` brings it up to date (a few seconds, "
            "nothing is lost)"
        )
        self.version = version


def migrate_catalog(con: duckdb.DuckDBPyConnection, path: Path, version: int) -> None:
    """A catalog of schema 7 brought up to this one in its own file: shard paths relative
    to the shard folder (not the catalog's folder: the pair can be renamed), each
    file's sha256, and the catalog's identity, marked in its folder."""
    from .shards import file_sha256, folder

    root = folder(path.resolve())
    rows = con.execute("SELECT path, source_id, table_name, rows, bytes FROM shards").fetchall()
    with transaction(con):
        con.execute("DROP TABLE shards")
        con.execute(tables.SHARDS.ddl())
        for old, sid, table, n, size in rows:
            rel = old.split("/", 1)[1] if "/" in old else old
            f = root / rel
            sha = file_sha256(f) if f.is_file() else None
            con.execute("INSERT INTO shards VALUES (?, ?, ?, ?, ?, ?)",
                        [rel, sid, table, n, size, sha])  # fmt: skip
        mark = new_identity(con)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    [str(SCHEMA_VERSION)])  # fmt: skip
        _install(con, path)
    mark_folder(root, mark, path)


def migrate_in_place(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """A database of an older schema brought to LEGACY_VERSION in its own file."""
    from .records import reread  # records reads this module's tables: imported late

    with transaction(con):
        for v in range(version, LEGACY_VERSION):
            for sql in MIGRATIONS[v]:
                con.execute(sql)
            if v + 1 in NEW_TABLES:
                reread(con, NEW_TABLES[v + 1])
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    [str(LEGACY_VERSION)])  # fmt: skip


def connect(
    path: str | os.PathLike | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A writable connection to a checked (or new) database; while another writer holds
    it, waits up to `wait` seconds."""
    return open_writer(path, wait, waiting)[0]


def open_writer(
    path: str | os.PathLike | None = None,
    wait: float = 0.0,
    waiting: Callable[[], None] | None = None,
    views: str = "all",
) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """`connect`, and whether this call made the catalog: decided under the file's lock
    (an empty file), never from whether the path existed before (two first ingests both
    saw none). `views`: "all", "tables" (the stored tables' only: an ingest installs the
    named ones once it has registered) or "none" (a check that the catalog is writable)."""
    p = db_path(path)
    con = _connect(p, read_only=False, wait=wait, waiting=waiting)
    if _version(con) is None and _empty(con):
        con.execute("BEGIN")
        con.execute(DDL)
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        new_identity(con)  # the folder is marked at the first commit that registers
        if views != "none":  # an ingest's named views come with its registration
            _install(con, p, named=views == "all")
        con.execute("COMMIT")
        try:
            check_writable(con, p, folder(p.resolve()))
        except ForensicsError:
            con.close()
            for f in (p, p.with_name(p.name + ".wal")):
                f.unlink(missing_ok=True)
            raise
        return con, True
    else:
        try:
            _check(con, p, writable=True)
        except ForensicsError:  # Legacy too: upgrading is upgrade.py's job
            con.close()
            raise
        try:
            check_writable(con, p, folder(p.resolve()))
        except ForensicsError:
            con.close()
            raise
        if views != "none":  # views follow the code that wrote last
            _install(con, p, named=views == "all")
    return con, False


def _install(
    con: duckdb.DuckDBPyConnection,
    p: Path,
    temp: bool = False,
    skip: frozenset | None = None,
    named: bool = True,
) -> None:
    """The stored tables' views over the shards (a damaged source's files left out: the
    commands that work beside it see the others; `skip`: those sources, when the caller
    has checked already), then the named queries' views."""
    from .integrity import check
    from .shards import Unreadable, install_table_views

    root = folder(p.resolve())  # p, not the connection's file: `:memory:` has none
    try:
        install_table_views(con, root, temp=temp, skip=check(con, root).sources if skip is None
                            else skip)  # fmt: skip
    except Unreadable as exc:  # found damaged now: the check names it, its source left out
        from .integrity import unreadable

        if not unreadable(exc.files):
            raise exc.error from None
        install_table_views(con, root, temp=temp, skip=check(con, root).sources)
    if named:
        install_views(con, temp=temp)


def reinstall(con: duckdb.DuckDBPyConnection, named: bool = True) -> None:
    """A writer's views again, after it registered or moved shards; `named`: the named
    queries' too (refresh_derived, which an ingest runs next, installs those itself)."""
    _install(con, catalog_path(con), named=named)


def connect_read_only(
    path: str | os.PathLike | None = None, damaged_ok: bool = False, intent_ok: bool = False
) -> duckdb.DuckDBPyConnection:
    """A checked read-only connection. A damaged source (integrity.py) is refused with one
    line naming it and the way out, unless `damaged_ok` (`sources` lists it)."""
    from .integrity import check

    p = db_path(path)
    if not intent_ok and (line := interrupted(p)) is not None:
        raise ForensicsError(line)
    if not p.exists():
        raise ForensicsError(
            f"no database at {p}: run `forensics ingest` first, or name one with --db PATH "
            "or FORENSICS_DB"
        )
    con = _connect(p, read_only=True, wait=READ_WAIT, intent_ok=intent_ok)
    try:
        _check(con, p)
    except ForensicsError:
        con.close()
        raise
    note = reading_note(con, p, shard_root(con))
    if note:
        logging.getLogger("forensics").warning(note)
    damage = check(con, shard_root(con))
    if damage and not damaged_ok:
        con.close()
        raise ForensicsError(damage.line())
    # The file's views are those of the pd-forensics that wrote last; readers use this
    # one's (temporary views shadow stored ones and leave the file untouched), with the
    # shards' absolute paths wherever the folder is now.
    _install(con, p, temp=True, skip=damage.sources)  # checked once an open
    return con


def _empty(con: duckdb.DuckDBPyConnection) -> bool:
    return scalar(con, "SELECT count(*) FROM information_schema.tables") == 0


@contextmanager
def committing(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A writer's transaction: all or nothing, the catalog's next generation stamped in
    it, and the shard folder marked with it after the commit (a kill between the two is
    recognised and mended by the next writer: pairing.py)."""
    with transaction(con):
        yield con
        mark = stamp(con)
    try:
        reached("committed")
        with contextlib.suppress(OSError, ForensicsError):  # ForensicsError: in memory
            mark_folder(shard_root(con), mark, catalog_path(con))
    except KeyboardInterrupt:  # the write is whole: said so, never undone by the caller
        raise CommittedInterrupt(
            "interrupted after the commit: the write is complete (the next writer marks "
            "the shard folder)"
        ) from None


class CommittedInterrupt(KeyboardInterrupt):
    """Ctrl-C after a writer's commit: what it wrote stays, and the line says so."""

    def __init__(self, said: str) -> None:
        super().__init__(said)
        self.said = said


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """All or nothing: an exception (or a kill) leaves the file as it was."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """First value of the first row (the whole result is fetched: DuckDB ≥ 2 refuses
    further work on a connection with a half-read result)."""
    rows = con.execute(sql, params or []).fetchall()
    return rows[0][0] if rows else None


def first_row(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    rows = con.execute(sql, params or []).fetchall()
    return rows[0] if rows else None
