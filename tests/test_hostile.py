"""Hostile and broken input: each case is stored or quarantined with its reason, the rest
of the file goes on, and nothing aborts an ingest or answers with a traceback."""

from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import forensics
from forensics.outputs import replacing

from .helpers import cli, counts

GOOD = {"__REALTIME_TIMESTAMP": "1795935600000000", "_HOSTNAME": "h", "MESSAGE": "fine"}


def _jsonl(path: Path, objs: list) -> Path:
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return path


def test_json_values_of_any_type(tmp_path: Path, db: Path) -> None:
    lines = [
        GOOD,
        {**GOOD, "MESSAGE": 42},
        {**GOOD, "MESSAGE": True, "_HOSTNAME": 7},
        {**GOOD, "__CURSOR": {"a": 1}},
        {**GOOD, "MESSAGE": [104, 300]},
        {**GOOD, "MESSAGE": [{"x": 2}, "y"]},
        {**GOOD, "__REALTIME_TIMESTAMP": 18446744073709551615},
        {**GOOD, "_PID": -5, "PRIORITY": 99},
        {**GOOD, "MESSAGE": None},
        GOOD,
    ]
    path = _jsonl(tmp_path / "x.json", lines)
    res = forensics.ingest([str(path)], db)
    src = res.sources[0]
    assert (src.entries, src.quarantined) == (7, 3)
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine ORDER BY line", db)
    assert q == [
        (4, "json: __CURSOR is not a journald value (dict)"),
        (5, "json: MESSAGE is not a journald value (byte array with values outside 0-255)"),
        (6, "json: MESSAGE is not a journald value (list of dict)"),
    ]
    _, rows = forensics.query_rows(
        "SELECT message, host, ts_us, fields FROM entries ORDER BY entry_no", db
    )
    assert rows[1][:2] == ("42", "h") and rows[2][:2] == ("true", "7")
    assert rows[3][2] is None and "invalid_ts_us" in rows[3][3]
    assert '"invalid_pid":"-5"' in rows[4][3] and '"invalid_priority":"99"' in rows[4][3]


def test_export_length_past_the_end_costs_one_entry(tmp_path: Path, db: Path) -> None:
    good = b"".join(b"MESSAGE=m%d\n_HOSTNAME=h\n\n" % i for i in range(5000))
    bad = b"MESSAGE\n" + struct.pack("<Q", 10**12) + b"xx\n\n"
    path = tmp_path / "x.export"
    path.write_bytes(b"MESSAGE=first\n_HOSTNAME=h\n\n" + bad + good)
    res = forensics.ingest([str(path)], db)
    assert (res.sources[0].entries, res.sources[0].quarantined) == (5001, 1)
    _, q = forensics.query_rows("SELECT reason FROM quarantine", db)
    assert q[0][0].startswith("export: binary field")


def test_huge_page_range_is_quarantined_not_expanded(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "c.log"
    path.write_text(
        "[2026-09-20 14:03:12] forensics:canary step=1 layer=3 changed=1-99999999999\n"
        "[2026-09-20 14:03:12] forensics:canary step=2 layer=3 changed=1-3 expected=1\n"
    )
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].records["canary"] == 1 and res.sources[0].quarantined == 1
    _, q = forensics.query_rows("SELECT reason FROM quarantine", db)
    assert "over 1,048,576 pages" in q[0][0]


def test_year_out_of_range_is_refused_before_anything(renderings, db: Path) -> None:
    proc = cli("ingest", str(renderings["short"]), "--year", "0", "--db", str(db))
    assert proc.returncode == 2 and not db.exists()
    assert proc.stderr.decode() == "error: --year 0 is outside 1970-9999\n"


def test_results_with_impossible_values(tmp_path: Path, db: Path) -> None:
    base = {"session": "s", "corrupted": False}
    path = tmp_path / "r.jsonl"
    path.write_text(
        "\n".join(
            orjson.dumps(o).decode()
            for o in [
                {**base, "rid": "a", "start": 1e30},
                {**base, "rid": "b", "start": 100.0, "end": 99.0},
                {**base, "rid": "c", "round": 1e30},
                {**base, "rid": "d", "start": 100.0, "end": 101.0},
                {**base, "rid": "d"},
                {**base, "rid": "e", "corrupted": 0.5},
            ]
        )
        + '\n{"session": "s", "rid": "f", "corrupted": false, "start": Infinity}\n'
    )
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].records == {"result": 1}
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine ORDER BY line", db)
    assert q == [
        (1, "results: start is not a time between 1970 and 9999: 1e+30"),
        (2, "results: end is before start"),
        (3, "results: round is not a 64-bit integer: 1e+30"),
        (5, "results: rid 'd' already on line 4"),
        (6, "results: corrupted is not true/false: 0.5"),
        (7, "results: not JSON"),
    ]


def test_results_looking_file_that_is_not_results_says_so(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("session,rid,latency\ns,a,1\n")
    proc = cli("ingest", str(path), "--db", str(db))
    assert proc.returncode == 2
    assert "looks like harness results" in proc.stderr.decode() and not db.exists()


def test_crlf_text_keeps_markers_and_clean_messages(renderings, tmp_path: Path, db: Path) -> None:
    text = renderings["short-iso-precise"].read_bytes().replace(b"\n", b"\r\n")
    path = tmp_path / "crlf.log"
    path.write_bytes(text)
    res = forensics.ingest([str(path)], db)
    _, rows = forensics.query_rows("SELECT count(*) FROM entries WHERE message LIKE '%\r%'", db)
    assert rows == [(0,)]
    _, boots = forensics.query_rows("SELECT count(DISTINCT boot_id) FROM entries", db)
    assert boots == [(2,)] and res.sources[0].quarantined == 0
    assert "CRLF line ends read as LF" in res.sources[0].notes


def test_iso_times_with_z_read_as_utc(renderings, tmp_path: Path, db: Path) -> None:
    """journalctl writes +0000; a copy that rewrote the zone as Z reads the same times
    (named: sniffed, Z reads as a collector's prefix)."""
    real = renderings["short-iso-precise"].read_bytes()
    path = tmp_path / "z.log"
    path.write_bytes(real.replace(b"+0000 ", b"Z "))
    assert b"Z " in path.read_bytes()
    other = tmp_path / "plus.duckdb"
    forensics.ingest([str(renderings["short-iso-precise"])], other)
    forensics.ingest([str(path)], db, fmt="short-iso-precise")
    q = "SELECT list(ts_us ORDER BY entry_no) FROM entries"
    _, plus = forensics.query_rows(q, other)
    _, z = forensics.query_rows(q, db)
    assert plus == z and None not in plus[0][0]


def test_glob_over_a_symlink_loop_ends(tmp_path: Path, db: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_text("[2026-09-20 14:03:12] hello\n")
    os.symlink("..", tmp_path / "a" / "loop")
    res = forensics.ingest([str(tmp_path / "**" / "*.log")], db)
    assert [s.entries for s in res.sources] == [1]


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "d.html"
    out.write_text("old")
    with pytest.raises(RuntimeError), replacing(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert out.read_text() == "old" and os.listdir(tmp_path) == ["d.html"]


def test_dashboard_out_that_cannot_be_written(renderings, tmp_path: Path, db: Path) -> None:
    forensics.ingest([str(renderings["export"])], db)
    (tmp_path / "file").write_text("")
    proc = cli("dashboard", "--db", str(db), "--out", str(tmp_path / "file" / "d.html"))
    assert proc.returncode == 2 and proc.stderr.decode().startswith("error: cannot write")
    assert len(proc.stderr.decode().splitlines()) == 1


def test_sql_reads_the_database_and_nothing_else(renderings, tmp_path: Path, db: Path) -> None:
    forensics.ingest([str(renderings["export"])], db)
    before = db.stat().st_mtime_ns
    target = tmp_path / "stolen.csv"
    for statement in [
        f"COPY entries TO '{target}'",
        f"EXPORT DATABASE '{tmp_path / 'dump'}'",
        "INSTALL httpfs",
        f"ATTACH '{tmp_path / 'other.db'}' AS o",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SET enable_external_access = true",
        "SELECT 1; SELECT 2",
        "DELETE FROM entries",
    ]:
        proc = cli("sql", statement, "--db", str(db))
        assert proc.returncode == 2, statement
        assert len(proc.stderr.decode().splitlines()) == 1, statement
    assert not target.exists() and not (tmp_path / "dump").exists()
    assert db.stat().st_mtime_ns == before and counts(db)[1] > 0


def test_csv_of_nested_columns(renderings, tmp_path: Path, db: Path) -> None:
    forensics.ingest([str(renderings["export"])], db)
    proc = cli("sql", "SELECT [1, 2] AS l, map(['k'], ['v']) AS m, 'x'::BLOB AS b",
               "--format", "csv", "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().splitlines() == ["l,m,b", '"[1,2]","{""k"":""v""}",78']


def test_ctrl_c_during_ingest(tmp_path: Path, db: Path) -> None:
    data = b"".join(b"[2026-09-20 14:03:12] line %d\n" % i for i in range(400_000))
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", "ingest", str(fifo), "--db", str(db)],
        env={**os.environ, "FORENSICS_PROGRESS_FD": str(w)}, pass_fds=(w,),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(w)
    with open(fifo, "wb") as fh, os.fdopen(r, "rb") as progress:
        fh.write(data)  # all but the end: the ingest waits for more, mid-transaction
        fh.flush()
        assert progress.readline().startswith(b"batch ")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.decode() == "error: interrupted: nothing was written\n"
    assert not db.exists()


def test_usage_errors_and_unexpected_ones_are_one_line(monkeypatch, capsys) -> None:
    from forensics import cli as cli_mod

    for argv in (["ingest"], ["rooms", "--limit", "x"], ["--bogus"]):
        with pytest.raises(SystemExit) as exc:
            cli_mod.main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and err.startswith("error: ")

    def boom(*a, **k):
        raise RuntimeError("something odd\nsecond line")

    monkeypatch.setattr("forensics.analyses.rooms.rooms", boom)  # imported by the command
    monkeypatch.setattr(cli_mod, "_scope", lambda *a, **k: contextlib.nullcontext())
    with pytest.raises(SystemExit) as exc:
        cli_mod.main(["rooms"])
    err = capsys.readouterr().err
    assert exc.value.code == 1
    assert err == (
        "error: unexpected RuntimeError: something odd (run with --debug or "
        "FORENSICS_DEBUG=1 for the traceback)\n"
    )
    with pytest.raises(SystemExit):
        cli_mod.main(["rooms", "--debug"])
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.endswith("something odd\n")


def test_one_sided_rooms_have_unknown_exposure(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "pd.log"
    log.write_text(
        "[2026-09-20 14:03:12] forensics:checksum side=src room=1 rid=a full=aa\n"
        "[2026-09-20 14:03:12] forensics:checksum side=dst room=1 rid=a full=aa\n"
        "[2026-09-20 14:03:12] forensics:checksum side=src room=2 rid=b full=bb\n"
        "[2026-09-20 14:03:12] forensics:checksum side=src room=3 rid=c full=cc\n"
        "[2026-09-20 14:03:12] forensics:checksum side=dst room=3 rid=c full=zz\n"
    )
    res = tmp_path / "r.jsonl"
    res.write_text(
        '{"session": "s", "rid": "a", "corrupted": false}\n'
        '{"session": "s", "rid": "b", "corrupted": true}\n'
        '{"session": "s", "rid": "c", "corrupted": true}\n'
    )
    forensics.ingest([str(log), str(res)], db)
    room = forensics.correlate(db).associations[0]
    assert room.excluded == 1  # b: missing_dst, exposure unknown
    assert (room.table.exposed_total, room.table.control_total) == (1, 1)
    chosen = forensics.correlate(db, bad=("mismatch", "missing_dst")).associations[0]
    assert chosen.excluded == 0 and chosen.table.exposed_total == 2


def test_a_nul_head_is_quarantined_and_the_lines_after_it_stored(tmp_path: Path) -> None:
    """logrotate's copytruncate leaves a hole of NUL bytes where the writer went on at
    its old offset: the hole is quarantined with its offset, the lines after it stored
    (the whole file was refused as binary)."""
    log = tmp_path / "sglang.log"
    lines = b"".join(b"2026-11-29T07:00:0%d.000001+0000 decode-0 python3[1]: line %d\n" % (i, i)
                     for i in range(3))  # fmt: skip
    log.write_bytes(b"\x00" * 300_000 + lines)
    db = tmp_path / "n.duckdb"
    res = forensics.ingest([str(log)], db)
    assert res.sources[0].entries == 3
    q = forensics.query("SELECT line, reason FROM quarantine", db).rows()
    assert q == [(1, "300,000 NUL bytes at offset 0, before line 1 (a file truncated while "
                     "written: logrotate's copytruncate?)")]  # fmt: skip
    only = tmp_path / "hole.log"
    only.write_bytes(b"\x00" * 1000)
    with pytest.raises(forensics.ForensicsError, match="1,000 NUL bytes and nothing else"):
        forensics.ingest([str(only)], tmp_path / "h.duckdb")


def test_a_full_disk_is_one_line_naming_the_path_and_exit_2() -> None:
    import errno

    from forensics.cli import _failure

    full = OSError(errno.ENOSPC, "No space left on device", "/inc.shards/entries-1.parquet")
    line, code = _failure(full, interrupted=False, debug=False)
    assert (line, code) == ("/inc.shards/entries-1.parquet: No space left on device", 2)
    arrow = OSError("IOError: error writing /x.parquet: No space left on device")
    assert _failure(arrow, interrupted=False, debug=False)[1] == 2
    assert _failure(OSError("other"), interrupted=False, debug=False)[1] == 1
