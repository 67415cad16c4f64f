"""Sources can be managed: one removed (every row of it, nothing else), or relabelled
with another host or run — and the named views follow."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from forensics.queries import all_queries

import forensics
from forensics.errors import ForensicsError
from forensics.store.sources import relabel_source, remove_source
from forensics.synthetic.planted import generate_planted, write_planted

from .helpers import cli, plain


@pytest.fixture
def incident(tmp_path: Path) -> Path:
    files = write_planted(generate_planted("host", requests=80, sessions=8), tmp_path / "in")
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(f) for f in files], db, run="incident")
    return db


def _one(db: Path, sql: str) -> list[tuple]:
    return forensics.query_rows(sql, db)[1]


def _source_id(db: Path, name: str) -> int:
    return next(s["source_id"] for s in forensics.list_sources(db) if s["path"].endswith(name))


def test_a_plain_client_reads_every_named_view_as_its_sql(incident: Path) -> None:
    """The file's named views are installed beside the stored rows (bound there against
    those rows): a plain client reads each as its SQL, and gets the rows stored for it."""
    con = plain(incident)
    try:
        stored = dict(con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal AND NOT temporary"
        ).fetchall())  # fmt: skip
        for q in (q for q in all_queries() if q.stored):  # a virtual view: its SQL only
            assert "derived_" not in stored[q.name] and "temp." not in stored[q.name], q.name
            view = con.execute(f"SELECT * FROM {q.name} EXCEPT ALL SELECT * FROM derived_{q.name}")
            rows = con.execute(f"SELECT count(*) FROM {q.name}").fetchall()[0][0]
            assert view.fetchall() == [], q.name
            assert rows == con.execute(f"SELECT count(*) FROM derived_{q.name}").fetchall()[0][0]
        assert con.execute("SELECT count(*) FROM requests").fetchall()[0][0] > 0
    finally:
        con.close()


def test_relabel_host_moves_entries_records_and_views(incident: Path) -> None:
    sid = _source_id(incident, "decode.export")
    res = relabel_source(incident, sid, host="decode-9")
    assert res["changed"]["entries.host"] > 0 and res["changed"]["batches.host"] > 0
    assert _one(incident, "SELECT DISTINCT host FROM batches") == [("decode-9",)]
    # the stored rows of the views were recomputed: every request now decoded there
    assert _one(incident, "SELECT DISTINCT decode_host FROM request_features") == [("decode-9",)]
    other = _one(incident, f"SELECT DISTINCT host FROM entries WHERE source_id <> {sid}")
    assert other == [("prefill-0",)]


def test_relabel_run_moves_the_source_and_drops_the_empty_run(incident: Path) -> None:
    sid = _source_id(incident, "results.jsonl")
    relabel_source(incident, sid, run="moved")
    assert _one(incident, "SELECT DISTINCT run FROM results") == [("moved",)]
    runs = {r for (r,) in _one(incident, "SELECT run FROM runs")}
    assert runs == {"incident", "moved"}  # incident still holds the journals
    assert [r.run for r in forensics.compare(incident).rates] == ["moved"]


def test_remove_takes_every_row_of_the_source_and_nothing_else(incident: Path) -> None:
    before = _one(incident, "SELECT count(*) FROM entries")[0][0]
    sid = _source_id(incident, "prefill-0.export")
    own = _one(incident, f"SELECT count(*) FROM entries WHERE source_id = {sid}")[0][0]
    res = remove_source(incident, sid)
    assert res["removed"]["entries"] == own > 0 and res["removed"]["req_stats"] > 0
    assert _one(incident, "SELECT count(*) FROM entries")[0][0] == before - own
    assert _one(incident, f"SELECT count(*) FROM req_stats WHERE source_id = {sid}") == [(0,)]
    assert _one(incident, "SELECT count(*) FROM request_features WHERE prefill_host IS NOT NULL"
                ) == [(0,)]  # fmt: skip
    assert sid not in {s["source_id"] for s in forensics.list_sources(incident)}


def _log(path: Path, *messages: str) -> str:
    path.write_text("".join(f"Nov 29 07:00:0{i} decode-0 python3[1]: {m}\n"
                            for i, m in enumerate(messages, 1)))  # fmt: skip
    return str(path)


def test_remove_restores_what_later_sources_dropped_as_its_duplicates(tmp_path: Path) -> None:
    tick = "forensics:checksum side=dst room=7 buf=kv full=ab"  # a record: read again
    db = tmp_path / "db.duckdb"
    forensics.ingest([_log(tmp_path / "a.log", tick)], db, year=2026)
    forensics.ingest([_log(tmp_path / "b.log", tick, "x")], db, year=2026)  # its tick is a's
    forensics.ingest([_log(tmp_path / "c.log", tick, "tock")], db, year=2026)  # so is this one
    assert [s["duplicates"] for s in forensics.list_sources(db)] == [0, 1, 1]
    res = remove_source(db, 1)
    # b's tick comes back to b; c's stays dropped: b holds it now
    assert res["restored"] == {2: 1}
    assert sorted(_one(db, "SELECT source_id, message FROM entries")) == sorted([
        (2, "x"), (2, tick), (3, "tock")])  # fmt: skip
    assert _one(db, "SELECT source_id, room FROM checksums") == [(2, 7)]
    assert _one(db, "SELECT source_id, count(*) FROM dropped_entries GROUP BY ALL") == [(3, 1)]
    assert [(s["entries"], s["duplicates"]) for s in forensics.list_sources(db)] == [
        (2, 0), (1, 1)]  # fmt: skip
    remove_source(db, 2)  # and now c's tick is nobody's but c's
    assert sorted(_one(db, "SELECT message FROM entries")) == sorted([("tock",), (tick,)])
    assert _one(db, "SELECT count(*) FROM dropped_entries") == [(0,)]


def test_remove_refuses_when_a_later_source_kept_no_copy(tmp_path: Path) -> None:
    from .helpers import legacy_copy

    db = tmp_path / "db.duckdb"
    forensics.ingest([_log(tmp_path / "a.log", "tick")], db, year=2026)
    forensics.ingest([_log(tmp_path / "b.log", "tick", "tock")], db, year=2026)
    old = legacy_copy(db, tmp_path / "old.duckdb")  # before shards: no copy of the drop
    forensics.store.upgrade(old)
    with pytest.raises(ForensicsError, match=r"other sources dropped entries as duplicates"):
        remove_source(old, 1)
    assert _one(old, "SELECT count(*) FROM entries") == [(2,)]  # nothing changed
    remove_source(old, 2)
    remove_source(old, 1)
    assert _one(old, "SELECT count(*) FROM entries") == [(0,)]


def test_cli_manages_sources_with_one_line_errors(incident: Path) -> None:
    listed = orjson.loads(cli("sources", "--db", str(incident), "--json").stdout)
    assert len(listed) == 3
    proc = cli("sources", "relabel", "1", "--db", str(incident))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == "error: relabel needs --host or --run"
    proc = cli("sources", "remove", "99", "--db", str(incident))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == "error: no source 99; known: 1, 2, 3"
    proc = cli("sources", "relabel", "1", "--host", "prefill-7", "--db", str(incident), "--json")
    assert proc.returncode == 0, proc.stderr.decode()
    assert orjson.loads(proc.stdout)["changed"]["entries.host"] > 0
