"""Stored answers (store/derived.py): ingest keeps each named view's rows as
`derived_<name>`; readers use them only while they are what the view's SQL gives now."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from forensics.queries import all_queries

import forensics
from forensics.analyses.rooms import rooms
from forensics.store import SCHEMA_VERSION, connect, connect_read_only, refresh_derived, transaction
from forensics.store.database import reinstall
from forensics.store.shards import ShardWriter, folder, list_files, source_folder
from forensics.synthetic import incident

from ..helpers import plain


def checksum(i: int, side: str, room: int, head: str) -> str:
    host = "prefill-0" if side == "src" else "decode-0"
    return (f"2026-11-29T07:00:{i:02d}.000000+0000 {host} python3[1]: "
            f"forensics:checksum side={side} room={room} head={head}\n")  # fmt: skip


def ingest_lines(tmp: Path, db: Path, lines: list[str], name: str = "a.log") -> None:
    f = tmp / name
    f.write_text("".join(lines))
    forensics.ingest([str(f)], db)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Logs and harness results of two runs, each ingested by its own call (results last),
    with bad rooms and unexpected page writes planted."""
    tmp = tmp_path_factory.mktemp("derived")
    db = tmp / "db.duckdb"
    for run, seed in (("a", 5), ("b", 6)):
        inc = incident.generate(sessions=6, rounds=5, steps_per_request=2, seed=seed,
                                corruption="effect", bad_share=0.3)  # fmt: skip
        logs = [incident.write_export(inc.prefill, tmp / f"{run}-prefill.export"),
                incident.write_export(inc.decode, tmp / f"{run}-decode.export")]  # fmt: skip
        forensics.ingest([str(p) for p in logs], db, run=run)
        forensics.ingest([str(incident.write_results(inc.results, tmp / f"{run}.jsonl"))], db,
                         run=run)  # fmt: skip
    return db


def _same_rows(con: duckdb.DuckDBPyConnection, a: str, b: str) -> tuple[int, int, int]:
    """(rows of a, rows in a not in b, rows in b not in a), duplicates counted."""
    n = con.execute(f"SELECT count(*) FROM ({a})").fetchall()[0][0]
    ab = con.execute(f"SELECT count(*) FROM (({a}) EXCEPT ALL ({b}))").fetchall()[0][0]
    ba = con.execute(f"SELECT count(*) FROM (({b}) EXCEPT ALL ({a}))").fetchall()[0][0]
    return n, ab, ba


def _stored() -> list:
    return [q for q in all_queries() if q.stored]


def _view_body(con: duckdb.DuckDBPyConnection, name: str) -> str:
    return con.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = ? AND temporary", [name]
    ).fetchall()[0][0]


def _not_reading(view: str) -> set[str]:
    """The stored views that do not read `view`, directly or through another view."""
    by_name = {q.name: q for q in all_queries()}

    def reads(name: str) -> bool:
        return any(d == view or reads(d) for d in by_name[name].depends if d in by_name)

    return {q.name for q in _stored() if q.name != view and not reads(q.name)}


def _from_stored(db: Path) -> set[str]:
    """The views a reader of db answers from stored rows (the others: from their SQL)."""
    con = connect_read_only(db)
    try:
        return {q.name for q in all_queries() if f"derived_{q.name}" in _view_body(con, q.name)}
    finally:
        con.close()


def test_stored_rows_are_the_views_rows(two_runs: Path) -> None:
    # The file's own views are the SQL (a plain DuckDB connection reads them).
    con = plain(two_runs)
    try:
        for q in _stored():
            _, extra, missing = _same_rows(con, f"SELECT * FROM derived_{q.name}", q.sql)
            assert (extra, missing) == (0, 0), q.name
            described = con.execute(f"DESCRIBE derived_{q.name}").fetchall()
            assert [(r[0], r[1]) for r in described] == [(c[0], c[1]) for c in q.columns]
        # the planted incident gives every view rows to compare
        views = ("rooms", "requests", "canary_writes", "result_links", "skew", "request_evidence")
        for name in views:
            assert con.execute(f"SELECT count(*) FROM derived_{name}").fetchall()[0][0] > 0
        for q in all_queries():  # a virtual view is never stored: computed as it is read
            held = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                               [f"derived_{q.name}"]).fetchall()[0][0]  # fmt: skip
            assert held == int(q.stored), q.name
    finally:
        con.close()
    assert _from_stored(two_runs) == {q.name for q in _stored()}


def test_refresh_skips_what_is_fresh(two_runs: Path, tmp_path: Path) -> None:
    # the incident folder moved elsewhere: its stored rows are still this data's
    copy = tmp_path / "moved" / "db.duckdb"
    copy.parent.mkdir()
    shutil.copy(two_runs, copy)
    shutil.copytree(folder(two_runs), folder(copy))
    assert _from_stored(copy) == {q.name for q in _stored()}
    con = connect(copy)
    try:
        with transaction(con):
            assert refresh_derived(con) == []
    finally:
        con.close()


def test_data_written_without_a_refresh_is_answered_from_the_sql(tmp_path: Path) -> None:
    """What an older pd-forensics does: ingest without storing answers. Its new source
    makes the stored rows stale; readers must not use them."""
    db = tmp_path / "t.duckdb"
    ingest_lines(tmp_path, db, [checksum(1, "src", 1, "a"), checksum(2, "dst", 1, "a")])
    assert rooms(db).counts == {"default": {"match": 1}}
    con = connect(db)
    try:
        with transaction(con):
            con.execute(
                """INSERT INTO sources (source_id, run, path, sha256)
                   VALUES (99, 'default', 'older-writer.log', 'f00d')"""
            )
            # room 1's src record again, as room 2's, with other bytes, in a shard of its own
            rows = con.sql("""SELECT * EXCLUDE (source_id) REPLACE (2::UBIGINT AS room,
                                     'b' AS head)
                              FROM checksums WHERE side = 'src' AND room = 1""").arrow()
            rows = rows.read_all() if hasattr(rows, "read_all") else rows
            where = source_folder(folder(db), 99)
            where.mkdir()
            writer = ShardWriter(where, SCHEMA_VERSION)
            writer.write("checksums", rows)
            (name,) = writer.close()["checksums"]
            list_files(con, folder(db), 99, "checksums", [where / name])
            reinstall(con)
    finally:
        con.close()
    assert rooms(db).counts == {"default": {"missing_dst": 1, "match": 1}}
    assert _from_stored(db) == set()  # every view: the new source is in none of them
    # the next ingest stores them again
    ingest_lines(tmp_path, db, [checksum(3, "dst", 2, "b")], name="next.log")
    assert rooms(db).counts == {"default": {"match": 2}}
    assert _from_stored(db) == {q.name for q in _stored()}


def test_rows_stored_by_other_sql_are_not_used(tmp_path: Path) -> None:
    """A view whose SQL changed (another version of pd-forensics stored it): the stored
    rows are ignored, and so are those of the views that read it."""
    db = tmp_path / "t.duckdb"
    ingest_lines(tmp_path, db, [checksum(1, "src", 1, "a"), checksum(2, "dst", 1, "b")])
    con = connect(db)
    try:
        con.execute("UPDATE meta SET value = 'other' || value WHERE key = 'derived:rooms'")
        con.execute("UPDATE derived_rooms SET verdict = 'match'")  # what other SQL said
    finally:
        con.close()
    assert rooms(db).counts == {"default": {"mismatch": 1}}
    # rooms, and what reads it (request_evidence through requests), from their SQL
    assert _from_stored(db) == _not_reading("rooms")
    assert {"result_links", "canary_writes", "templates"} <= _not_reading("rooms")


def test_a_failed_ingest_keeps_the_stored_rows(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    ingest_lines(tmp_path, db, [checksum(1, "src", 1, "a"), checksum(2, "dst", 1, "a")])
    more = tmp_path / "more.log"
    more.write_text(checksum(3, "src", 2, "b"))
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01\x02 not any format" * 100)
    with pytest.raises(forensics.ForensicsError, match="unknown format"):
        forensics.ingest([str(more), str(bad)], db)
    assert _from_stored(db) == {q.name for q in _stored()}
    assert rooms(db).counts == {"default": {"match": 1}}


def test_a_stored_table_dropped_by_hand_is_answered_from_the_sql(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    ingest_lines(tmp_path, db, [checksum(1, "src", 1, "a"), checksum(2, "dst", 1, "b")])
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE derived_rooms")
    con.close()
    assert rooms(db).counts == {"default": {"mismatch": 1}}
    assert _from_stored(db) == _not_reading("rooms")
