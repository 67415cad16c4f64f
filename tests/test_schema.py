"""The stored schema is the declared one: a new catalog, and a database of the oldest
version still upgradable brought up by the migrations, hold the same tables, views and
columns; the shards' schema is the declarations'; the docs' tables page is the
declarations'."""

from __future__ import annotations

from pathlib import Path

import duckdb
from forensics.parsers import tables
from forensics.queries import all_queries

from forensics.store import database
from forensics.store.upgrade import upgrade

from .helpers import legacy_copy, plain

DATA = Path(__file__).parent / "data"
SCHEMA = """SELECT c.table_name, t.table_type, c.column_name, c.data_type, c.is_nullable
            FROM information_schema.columns c JOIN information_schema.tables t
              ON t.table_name = c.table_name AND t.table_schema = c.table_schema
            WHERE c.table_schema = 'main' AND c.table_name NOT LIKE 'derived_%'
            ORDER BY c.table_name, c.ordinal_position"""


SPELLED = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}  # as information_schema spells it


def _columns(path: Path) -> list[tuple]:
    con = plain(path)
    try:
        return con.execute(SCHEMA).fetchall()
    finally:
        con.close()


def test_old_schema_plus_migrations_equals_declaration(tmp_path: Path) -> None:
    old = tmp_path / "v4.duckdb"
    con = duckdb.connect(str(old))
    con.execute((DATA / "schema_v4.sql").read_text())
    con.execute("INSERT INTO meta VALUES ('schema_version', '4')")
    con.close()
    assert upgrade(old) == (4, database.SCHEMA_VERSION)
    new = tmp_path / "new.duckdb"
    database.connect(new).close()
    assert _columns(old) == _columns(new)
    assert (tmp_path / "v4.duckdb.v4").is_file()  # the old file, kept


def test_declared_columns_are_the_stored_ones(tmp_path: Path) -> None:
    """The catalog's tables are their declarations (column, type, NOT NULL), and every
    sharded table a view of its declared columns and types; nothing else creates tables:
    the DDL derives from parsers/tables.py."""
    path = tmp_path / "new.duckdb"
    database.connect(path).close()
    stored: dict[str, list[tuple]] = {}
    kinds: dict[str, str] = {}
    for table, kind, column, dtype, nullable in _columns(path):
        stored.setdefault(table, []).append((column, dtype, nullable == "NO"))
        kinds[table] = kind
    named = {q.name for q in all_queries()}
    assert {t for t, k in kinds.items() if k == "BASE TABLE"} == set(tables.CATALOG)
    assert {t for t, k in kinds.items() if k == "VIEW"} == set(tables.SHARDED) | named
    for t in tables.CATALOG.values():
        declared = [(c.name, SPELLED.get(c.type, c.type), c.not_null or c.key == "PRIMARY KEY")
                    for c in t.all_columns]  # fmt: skip
        assert stored[t.name] == declared, t.name
    for t in tables.SHARDED.values():
        assert [c[:2] for c in stored[t.name]] == [(c.name, c.type) for c in t.all_columns]


def test_shards_hold_the_declared_columns(tmp_path: Path) -> None:
    """A shard file's schema is its table's declaration without `source_id` (its folder),
    its schema version and table in the file's metadata; the view over it reads back the
    declared types."""
    import pyarrow.parquet as pq

    from forensics import ingest

    log = tmp_path / "decode-0.log"
    log.write_text("2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: forensics:checksum "
                   "side=dst room=3 buf=kv full=ab\nthis line is not journalctl output\n")  # fmt: skip
    db = tmp_path / "t.duckdb"
    ingest([str(log)], db)
    con = plain(db)
    files = con.execute("SELECT path, table_name FROM shards ORDER BY path").fetchall()
    con.close()
    assert {t for _, t in files} == {"entries", "checksums", "lines", "quarantine"}
    for path, table in files:
        f = pq.ParquetFile(tmp_path / "t.shards" / path)
        assert f.schema_arrow.names == [c for c in tables.SHARDED[table].names
                                        if c != "source_id"]  # fmt: skip
        meta = f.schema_arrow.metadata
        assert meta[b"forensics.schema_version"] == str(database.SCHEMA_VERSION).encode()
        assert meta[b"forensics.table"] == table.encode()
        assert Path(path).parts[:1] == ("source_id=1",)


def test_what_readers_fill_is_declared() -> None:
    """The readers' columns are the tables' (ingest fills the rest): a column added to a
    declaration and not to a reader, or the other way round, fails here."""
    from forensics.parsers.journald.schema import ENTRY_SCHEMA
    from forensics.parsers.results import SCHEMA as RESULT_SCHEMA

    from forensics.store.records import TABLES as RECORD_TABLES

    entries = tables.ENTRIES.names
    # ingest fills these: the shard folder, the rejoined pieces, the key, inherited times
    assert set(entries) - set(ENTRY_SCHEMA.names) == {"source_id", "parts", "key", "ts_inherited"}
    assert set(ENTRY_SCHEMA.names) <= set(entries)
    assert RESULT_SCHEMA.names == [n for n in tables.RESULTS.names if n != "source_id"]
    assert set(RECORD_TABLES.values()) <= set(tables.TABLES)


def test_tables_page_is_generated() -> None:
    page = Path(__file__).parents[1] / "docs" / "tables.md"
    assert page.read_text(encoding="utf-8") == tables.markdown(), (
        "docs/tables.md is stale: python -m forensics.parsers.tables > docs/tables.md"
    )


def test_every_event_kind_a_pattern_sets_is_documented() -> None:
    from forensics.parsers.patterns import builtin

    kinds = {p.set["kind"] for p in builtin() if p.table == "events"}
    assert kinds <= set(tables.EVENT_KINDS)
    assert set(tables.EVENT_KINDS) - kinds == set()  # and each documented kind is read


def test_upgrade_reads_stored_entries_for_the_new_tables(tmp_path: Path) -> None:
    from forensics import ingest
    from forensics import query_rows as query

    log = tmp_path / "decode-0.log"
    log.write_text(
        "[2026-09-24 01:50:40] ReqTimeStats(rid=r1, bootstrap_room=4, input_len=10, "
        "cached_input_len=0, output_len=2, attempts=0, type=decode): transfer_duration=3.00ms\n"
        "[2026-09-24 01:50:41] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_token_ratio: 0.1 -> 0.3\n"
        "[2026-09-24 01:50:42] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, "
        "token usage: 0.01, #running-req: 0, #queue-req: 0\n"
    )
    with log.open("a") as fh:
        fh.write(
            '[2026-09-24 01:50:43] {"timestamp": "2026-09-24T01:50:43.5", '
            '"event": "scheduler.status", "running_rids": ["r1"], "queued_rids": []}\n'
        )
    new_db = tmp_path / "t.duckdb"
    ingest([str(log)], new_db)
    new = [t for v in sorted(database.NEW_TABLES) for t in database.NEW_TABLES[v]]
    want = {t: query(f"SELECT * EXCLUDE (source_id) FROM {t}", new_db)[1] for t in new}
    assert want["req_stats"] and want["events"] and want["scheduler_status"]
    db = legacy_copy(new_db, tmp_path / "old.duckdb")
    con = duckdb.connect(str(db))  # as a version-4 database: the new tables never existed
    for t in new:
        con.execute(f"DROP TABLE {t}")
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.close()
    assert upgrade(db) == (4, database.SCHEMA_VERSION)
    got = {t: query(f"SELECT * EXCLUDE (source_id) FROM {t}", db)[1] for t in new}
    assert got == want
    assert query("SELECT count(*) FROM batches", db)[1] == [(1,)]  # the old tables as they were
