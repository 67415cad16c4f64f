"""Databases of schema 6 and older, which kept every row in the .duckdb file, written anew
as a catalog and shards: `forensics upgrade` (and a writing command that finds one).

The old file is brought to schema 6 in place (database.MIGRATIONS), each source's rows
are written to its own shard folder, and a new catalog takes the old file's name; the old
one stays beside it as `<name>.v<version>` (DuckDB does not shrink a file, and nothing is
deleted that the user did not ask to delete). A failure leaves the old file as it was.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import duckdb

from ..errors import ForensicsError
from ..parsers.tables import LEGACY, SHARDED
from .database import (
    DDL,
    LEGACY_VERSION,
    SCHEMA_VERSION,
    _connect,
    _version,
    migrate_in_place,
    transaction,
)
from .derived import install_views, refresh_derived
from .pairing import Mark, mark_folder, new_identity
from .shards import ShardWriter, folder, install_table_views, list_files, source_folder, staging
from .stage import write_query


def backup_name(path: Path, version: int) -> Path:
    return path.with_name(f"{path.name}.v{version}")


def convert(path: Path) -> Path:
    """Write the legacy database at `path` as a catalog and shards; the old file's new
    name (its backup)."""
    old = _connect(path, read_only=False)
    moved: list[Path] = []
    tmp = path.with_name(path.name + ".upgrading")
    try:
        version = _version(old) or 0
        if version < LEGACY_VERSION:
            migrate_in_place(old, version)
        backup = backup_name(path, version)
        if backup.exists():
            raise ForensicsError(f"cannot upgrade {path}: {backup} is in the way")
        root = folder(path)
        with staging(root) as where:
            written = _write_shards(old, where)
            old.close()
            # in place before the catalog lists them: unregistered, they are invisible
            for sid, staged in written.items():
                target = source_folder(root, sid)
                shutil.rmtree(target, ignore_errors=True)  # no legacy file lists shards
                os.rename(staged, target)
                moved.append(target)
        for p in (tmp, tmp.with_name(tmp.name + ".wal")):
            p.unlink(missing_ok=True)
        mark = _new_catalog(tmp, path, sorted(written))
        os.rename(path, backup)
        wal = path.with_name(path.name + ".wal")
        if wal.exists():
            os.rename(wal, backup.with_name(backup.name + ".wal"))
        os.rename(tmp, path)
        mark_folder(root, mark, path)
        return backup
    except BaseException:
        for m in moved:
            shutil.rmtree(m, ignore_errors=True)
        for p in (tmp, tmp.with_name(tmp.name + ".wal")):
            p.unlink(missing_ok=True)
        raise
    finally:
        with contextlib.suppress(duckdb.Error):
            old.close()


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """The old table's columns as the declaration's (a column it lacks is NULL)."""
    have = {r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()}
    return ", ".join(
        f'"{c.name}"' if c.name in have else f'NULL::{c.type} AS "{c.name}"'
        for c in SHARDED[table].all_columns
        if c.name != "source_id"
    )


def _write_shards(con: duckdb.DuckDBPyConnection, where: Path) -> dict[int, Path]:
    """Each source's rows of every table into a staged folder of its own."""
    out: dict[int, Path] = {}
    tables = [t for t in LEGACY if t in SHARDED]
    for (sid,) in con.execute("SELECT source_id FROM sources ORDER BY source_id").fetchall():
        staged = where / str(sid)
        staged.mkdir()
        writer = ShardWriter(staged, SCHEMA_VERSION)
        for t in tables:
            order = "line" if t in ("results", "quarantine") else "entry_no"
            sql = f"SELECT {_columns(con, t)} FROM {t} WHERE source_id = {int(sid)}"
            write_query(con, writer, t, f"{sql} ORDER BY {order}")
        out[sid] = staged
    return out


def _new_catalog(tmp: Path, path: Path, sources: list[int]) -> Mark:
    """The catalog of the old file's runs and sources and their shards, written at `tmp`
    to take `path`'s place (paths relative to its folder)."""
    con = duckdb.connect(str(tmp))
    try:
        root = folder(path.resolve())
        con.execute("SET file_search_path = ?", [str(root)])
        with transaction(con):
            con.execute(DDL)
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
            mark = new_identity(con)
            quoted = str(path).replace("'", "''")
            con.execute(f"ATTACH '{quoted}' AS _forensics_legacy (READ_ONLY)")
            con.execute("INSERT INTO runs SELECT * FROM _forensics_legacy.runs")
            con.execute("INSERT INTO sources SELECT * FROM _forensics_legacy.sources")
            con.execute("DETACH _forensics_legacy")
            for sid in sources:
                for f in sorted(source_folder(root, sid).glob("*.parquet")):
                    list_files(con, root, sid, f.name.rsplit("-", 1)[0], [f])
            install_table_views(con, root)
            install_views(con)
            refresh_derived(con)
    finally:
        con.close()
    return mark


def create_legacy(con: duckdb.DuckDBPyConnection) -> None:
    """Schema 6's empty tables: what a benchmark fills in SQL before `upgrade` makes
    shards of them."""
    from ..parsers.tables import TABLES

    for name in LEGACY:
        con.execute(TABLES[name].ddl())
        if name == "quarantine":  # schema 7 added it
            con.execute("ALTER TABLE quarantine DROP COLUMN entry_no")
    con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(LEGACY_VERSION)])


def write_legacy(db: Path, out: Path) -> Path:
    """The catalog's rows as pd-forensics stored them at schema 6, every row in one
    .duckdb file: what `upgrade` reads (its tests) and the size this store is measured
    against (bench/shards.py)."""
    from .database import connect_read_only
    from .stage import arrow_table

    src = connect_read_only(db)
    con = duckdb.connect(str(out))
    try:
        create_legacy(con)
        for name in LEGACY:
            if name == "meta":
                continue
            cols = ", ".join(f'"{r[0]}"' for r in con.execute(f"DESCRIBE {name}").fetchall())
            con.from_arrow(arrow_table(src.sql(f"SELECT {cols} FROM {name}"))).insert_into(name)
        # the named views' stored rows, as that store kept them too
        for (table,) in src.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary"
                                    " AND table_name LIKE 'derived_%'").fetchall():  # fmt: skip
            con.from_arrow(arrow_table(src.sql(f"SELECT * FROM main.{table}"))).create(table)
        con.execute("CHECKPOINT")
    finally:
        con.close()
        src.close()
    return out
