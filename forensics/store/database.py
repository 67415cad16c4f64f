"""The DuckDB file: schema and its version, connections, and small helpers over them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from ..errors import ForensicsError
from ..parsers.tables import PATTERN_TABLES
from .derived import install_views

SCHEMA_VERSION = 6
# Tables added by a version: created by its migration, then filled from the stored
# entries (`reread`), so a database ingested before holds what a new ingest would.
NEW_TABLES = {5: ["req_stats", "request_meta", "events"], 6: ["scheduler_status"]}
# How a database of an older version becomes this one (each step one transaction).
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

_DDL = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE runs (
    run       VARCHAR PRIMARY KEY,
    tags      MAP(VARCHAR, VARCHAR),
    created   TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE TABLE sources (
    source_id    INTEGER PRIMARY KEY,
    run          VARCHAR NOT NULL,
    path         VARCHAR NOT NULL,
    sha256       VARCHAR NOT NULL UNIQUE,
    bytes        BIGINT,
    format       VARCHAR,
    compression  VARCHAR,
    lines        BIGINT,
    entries      BIGINT,
    duplicates   BIGINT,
    rejoined     BIGINT,
    quarantined  BIGINT,
    markers      BIGINT,
    notes        VARCHAR[],
    ingested_at  TIMESTAMPTZ DEFAULT current_timestamp
);
-- Messages are most of the bytes: zstd stores them 2.5x smaller and twice as fast as the
-- default string compression (measured on the benchmark journal).
CREATE TABLE entries (
    source_id    INTEGER NOT NULL,
    entry_no     BIGINT NOT NULL,
    ts_us        BIGINT,
    mono_us      BIGINT,
    boot_id      VARCHAR,
    host         VARCHAR,
    unit         VARCHAR,
    ident        VARCHAR,
    pid          BIGINT,
    priority     TINYINT,
    message      VARCHAR USING COMPRESSION zstd,
    message_raw  BLOB,
    cursor       VARCHAR,
    line_first   BIGINT,
    line_last    BIGINT,
    truncated    BOOLEAN,
    invalid_utf8 BOOLEAN,
    line_break   VARCHAR,
    fields       VARCHAR USING COMPRESSION zstd,
    parts        SMALLINT NOT NULL DEFAULT 1,
    key          UBIGINT NOT NULL
);
-- Forensic records (docs/log-contract.md). Each row keeps where it came from: the run,
-- the host and time of its journal entry, and (source_id, entry_no) of that entry.
CREATE TABLE checksums (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    side VARCHAR NOT NULL, room UBIGINT NOT NULL, rid VARCHAR, buf VARCHAR NOT NULL,
    layer VARCHAR, tp BIGINT, dtype VARCHAR, nbytes BIGINT,
    head VARCHAR, tail VARCHAR, "full" VARCHAR, extra VARCHAR
);
CREATE TABLE canary (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    step BIGINT NOT NULL, layer BIGINT NOT NULL, bs BIGINT, mode VARCHAR,
    expected BIGINT[], changed BIGINT[], unexpected BIGINT[],
    n_expected BIGINT, n_changed BIGINT, n_unexpected BIGINT, extra VARCHAR
);
CREATE TABLE steps (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    step BIGINT NOT NULL, bs BIGINT,
    rids VARCHAR,  -- the batch's request ids, comma-separated ('' when it logged none)
    rooms VARCHAR, -- the batch's rooms, comma-separated
    extra VARCHAR
);
{pattern_tables}
-- The reproducer harness: one row per request it sent, marked ok or corrupted.
CREATE TABLE results (
    run VARCHAR NOT NULL, source_id INTEGER NOT NULL, line BIGINT,
    session VARCHAR NOT NULL, round BIGINT, rid VARCHAR NOT NULL, room UBIGINT,
    corrupted BOOLEAN NOT NULL, reason VARCHAR, start_us BIGINT, end_us BIGINT,
    concurrency BIGINT, extra VARCHAR, status VARCHAR
);
CREATE TABLE quarantine (
    source_id INTEGER NOT NULL,
    line      BIGINT,
    reason    VARCHAR NOT NULL,
    raw       VARCHAR
);
"""
# The tables SGLang's lines fill are declared in parsers/tables.py; their DDL is derived.
DDL = _DDL.replace("{pattern_tables}", "\n".join(t.ddl() for t in PATTERN_TABLES.values()))


ENTRY_COLUMNS = [
    "source_id", "entry_no", "ts_us", "mono_us", "boot_id", "host", "unit", "ident", "pid",
    "priority", "message", "message_raw", "cursor", "line_first", "line_last", "truncated",
    "invalid_utf8", "line_break", "fields", "parts", "key",
]  # fmt: skip


def db_path(path: str | os.PathLike | None) -> Path:
    return Path(path or os.environ.get("FORENSICS_DB") or DEFAULT_DB)


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise ForensicsError(f"database {path} is locked by another process") from None
        raise ForensicsError(f"cannot open database {path}: {text.splitlines()[0]}") from None
    except duckdb.Error as exc:
        raise ForensicsError(f"cannot open database {path}: {str(exc).splitlines()[0]}") from None
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    return con


def _version(con: duckdb.DuckDBPyConnection) -> int | None:
    has_meta = scalar(
        con, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
    )
    if not has_meta:
        return None
    row = first_row(con, "SELECT value FROM meta WHERE key = 'schema_version'")
    return int(row[0]) if row else None


def _check(con: duckdb.DuckDBPyConnection, path: Path, writable: bool = False) -> None:
    v = _version(con)
    if v == SCHEMA_VERSION:
        return
    if v is None:
        raise ForensicsError(f"{path} is not a pd-forensics database (no schema version)")
    if v < SCHEMA_VERSION and all(k in MIGRATIONS for k in range(v, SCHEMA_VERSION)):
        if writable:
            _migrate(con, v)
            return
        raise ForensicsError(
            f"{path} has schema version {v}, this pd-forensics reads {SCHEMA_VERSION}: "
            "`forensics upgrade` brings it up to date (a few seconds, nothing is lost)"
        )
    hint = "a newer pd-forensics" if v > SCHEMA_VERSION else "an older pd-forensics"
    raise ForensicsError(
        f"{path} has schema version {v}, this pd-forensics reads {SCHEMA_VERSION}: "
        f"it was written by {hint}; re-ingest into a new file"
    )


def _migrate(con: duckdb.DuckDBPyConnection, version: int) -> None:
    from .records import reread  # records reads this module's tables: imported late

    with transaction(con):
        for v in range(version, SCHEMA_VERSION):
            for sql in MIGRATIONS[v]:
                con.execute(sql)
            if v + 1 in NEW_TABLES:
                reread(con, NEW_TABLES[v + 1])
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    [str(SCHEMA_VERSION)])  # fmt: skip


def upgrade(path: str | os.PathLike | None = None) -> tuple[int, int]:
    """Bring a database written by an older pd-forensics up to this schema: (from, to)."""
    p = db_path(path)
    if not p.exists():
        raise ForensicsError(f"no database at {p}")
    con = _connect(p, read_only=False)
    try:
        before = _version(con)
        _check(con, p, writable=True)
        install_views(con)
    finally:
        con.close()
    return before or SCHEMA_VERSION, SCHEMA_VERSION


def connect(
    path: str | os.PathLike | None = None,
) -> duckdb.DuckDBPyConnection:
    """A writable connection to a checked (or new) database."""
    p = db_path(path)
    new = not p.exists()
    con = _connect(p, read_only=False)
    if new or (_version(con) is None and _empty(con)):
        con.execute("BEGIN")
        con.execute(DDL)
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        install_views(con)
        con.execute("COMMIT")
    else:
        try:
            _check(con, p, writable=True)
        except ForensicsError:
            con.close()
            raise
        install_views(con)  # views follow the code that wrote last
    return con


def connect_read_only(path: str | os.PathLike | None = None) -> duckdb.DuckDBPyConnection:
    p = db_path(path)
    if not p.exists():
        raise ForensicsError(f"no database at {p}: run `forensics ingest` first")
    con = _connect(p, read_only=True)
    try:
        _check(con, p)
    except ForensicsError:
        con.close()
        raise
    # The file's views are those of the pd-forensics that wrote last; readers use this
    # one's (temporary views shadow stored ones and leave the file untouched).
    install_views(con, temp=True)
    return con


def _empty(con: duckdb.DuckDBPyConnection) -> bool:
    return scalar(con, "SELECT count(*) FROM information_schema.tables") == 0


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
