"""What an ingest says of what it read: a file read twice is one line saying where it
already is; a dump's or a trace's file name is no host; rooms received more than once
are counted in words."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

import forensics

from .helpers import cli
from .test_request_traces import _record

DUMPS = Path(__file__).parent / "data" / "flight-recorder"


def test_a_file_ingested_again_is_one_line_and_no_table(tmp_path: Path) -> None:
    log, db = tmp_path / "decode-0.log", tmp_path / "t.duckdb"
    log.write_text("[2026-09-20 14:03:14] Decode batch, #running-req: 3, #token: 90, "
                   "token usage: 0.01, #queue-req: 0\n")  # fmt: skip
    forensics.ingest([str(log)], db)
    again = cli("ingest", str(log), "--db", str(db))
    assert again.returncode == 0, again.stderr
    said = f"skipped {log}: already ingested as source 1 in run default (same sha256)\n"
    assert again.stdout.decode() == said and not again.stderr
    doc = orjson.loads(cli("ingest", str(log), "--db", str(db), "--json").stdout)
    (src,) = doc["sources"]
    assert (src["status"], src["reason"]) == (
        "skipped", "already ingested as source 1 in run default (same sha256)")  # fmt: skip


def test_a_dump_and_a_trace_take_no_host_from_their_file_names(tmp_path: Path) -> None:
    trace = tmp_path / "decode-0.jsonl"  # a name that would read as a host
    trace.write_bytes(b"\n".join(orjson.dumps(_record(i, f"x{i}", 1_780_000_000_000 + i))
                                 for i in range(2)) + b"\n")  # fmt: skip
    dump = tmp_path / "nccl_trace_rank_1"
    shutil.copy(DUMPS / "nccl_trace_rank_1", dump)
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(trace), str(dump)], db)
    _, rows = forensics.query_rows(
        "SELECT s.format, count(*), count(e.host) FROM entries e JOIN sources s "
        "USING (source_id) GROUP BY ALL ORDER BY 1", db)  # fmt: skip
    assert rows == [("dynamo-request-trace", 2, 0), ("flight-recorder", rows[1][1], 0)]
    _, ranks = forensics.query_rows("SELECT DISTINCT rank FROM collectives", db)
    assert ranks == [(1,)]  # the rank still comes from the name
    named = tmp_path / "named.duckdb"
    forensics.ingest([str(dump)], named, host="trainer-1")
    _, hosts = forensics.query_rows("SELECT DISTINCT host FROM entries", named)
    assert hosts == [("trainer-1",)]


def test_rooms_received_more_than_once_are_said(tmp_path: Path) -> None:
    forensics.demo(tmp_path)
    db = tmp_path / "forensics.duckdb"
    _, rows = forensics.query_rows(
        "SELECT count(DISTINCT room), count(DISTINCT room) FILTER (verdict = 'conflict') "
        "FROM rooms WHERE dst_count > 1", db)  # fmt: skip
    ((n, bad),) = rows
    assert n > bad > 0  # the demo plants duplicates, alike and disagreeing
    said = forensics.rooms(db).sentences()
    line = (f"demo: {n} rooms were received more than once ({n - bad} with identical "
            f"records, judged as one; {bad} whose records disagree, a conflict)")  # fmt: skip
    assert line in said
    assert line in forensics.report(db).sentences()
    assert forensics.rooms(db).as_dict()["received_more_than_once"] == {
        "demo": {"rooms": n, "conflicting": bad}}  # fmt: skip


def test_a_damaged_archive_in_a_folder_is_skipped_and_the_rest_stored(tmp_path: Path) -> None:
    import gzip

    folder = tmp_path / "in"
    folder.mkdir()
    data = bytearray(gzip.compress(b"2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: x\n"
                                   * 5000))  # fmt: skip
    data[len(data) // 2 : len(data) // 2 + 32] = bytes(32)  # its middle zeroed
    (folder / "cut.log.gz").write_bytes(bytes(data))
    (folder / "decode-0.log").write_text("[2026-09-20 14:03:14] Decode batch, #running-req: 3, "
                                         "#token: 90, token usage: 0.01, #queue-req: 0\n")  # fmt: skip
    db = tmp_path / "t.duckdb"
    got = cli("ingest", str(folder), "--db", str(db))
    assert got.returncode == 0, got.stderr
    said = got.stdout.decode()
    assert f"skipped {folder / 'cut.log.gz'}: corrupt .gz archive" in said
    _, rows = forensics.query_rows("SELECT count(*) FROM entries", db)
    assert rows == [(1,)]
    named = cli("ingest", str(folder / "cut.log.gz"), "--db", str(tmp_path / "n.duckdb"))
    err = named.stderr.decode()
    assert named.returncode == 2 and err.count("\n") == 1 and "cut.log.gz: corrupt" in err
    assert not (tmp_path / "n.duckdb").exists()
