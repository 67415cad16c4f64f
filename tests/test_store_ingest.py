"""Idempotency, overlap dedupe, atomicity, quarantine and the errors users see."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

import forensics
from forensics.errors import ForensicsError
from forensics.store import SCHEMA_VERSION
from forensics.store.shards import folder, source_folder
from forensics.store.sources import dedupe_source

from . import corpus
from .helpers import cli, counts, legacy_copy, messages, plain

N = len(corpus.expected())


def test_same_file_twice_is_skipped(renderings, db: Path) -> None:
    forensics.ingest([str(renderings["json"])], db)
    res = forensics.ingest([str(renderings["json"])], db, run="other")
    assert res.sources[0].status == "skipped"
    assert "sha256" in res.sources[0].reason
    assert counts(db) == (1, N, 0)


@pytest.mark.parametrize("fmt", ["json", "short-iso-precise", "short-monotonic"])
def test_overlapping_exports_add_no_duplicates(
    renderings, tmp_path: Path, db: Path, fmt: str
) -> None:
    """Two cuts of one rendering that overlap: by identity (json), line for line over the
    common span (short-iso-precise); short-monotonic, with no wall clock, is said and
    merged only when asked (`sources dedupe`)."""
    lines = renderings[fmt].read_bytes().splitlines(keepends=True)
    # Cut at entry starts (never inside a multi-line entry or the LineMax pair 9-10).
    starts = [i for i, ln in enumerate(lines) if not ln.startswith(b" ")]
    a, b = starts[4], starts[8]
    (tmp_path / "early").write_bytes(b"".join(lines[:b]))
    (tmp_path / "late").write_bytes(b"".join(lines[a:]))
    r1 = forensics.ingest([str(tmp_path / "early")], db)
    r2 = forensics.ingest([str(tmp_path / "late")], db)
    if fmt == "short-monotonic":
        assert any("sources dedupe 2 --against 1" in n for n in r2.sources[0].notes)
        assert r2.sources[0].duplicates == 0
        assert dedupe_source(db, 2, 1)["dropped"] == 4  # by message alone, in order
    else:
        assert r2.sources[0].duplicates > 0
        assert r1.sources[0].entries + r2.sources[0].entries == N
    assert sorted(messages(db)) == sorted(
        e.message.decode("utf-8", "replace") for e in corpus.expected()
    )


def test_identical_lines_in_one_source_are_both_kept(tmp_path: Path, db: Path) -> None:
    line = b"Nov 29 07:00:01 decode-0 python3[1]: tick\n"
    (tmp_path / "a.log").write_bytes(line * 3)
    (tmp_path / "b.log").write_bytes(line * 2 + b"Nov 29 07:00:02 decode-0 python3[1]: tock\n")
    forensics.ingest([str(tmp_path / "a.log")], db, year=2026)
    res = forensics.ingest([str(tmp_path / "b.log")], db, year=2026)
    # two lines are too few to call b.log a.log's (two containers may print them): kept
    assert res.sources[0].duplicates == 0
    assert any("sources dedupe 2 --against 1" in n for n in res.sources[0].notes)
    # asked: a.log already holds three "tick"s; b.log's two are the same, "tock" is new
    assert dedupe_source(db, 2, 1)["dropped"] == 2
    assert sorted(messages(db)) == ["tick", "tick", "tick", "tock"]


def test_garbage_lines_are_quarantined_with_line_and_reason(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "mixed.log"
    f.write_bytes(
        b"2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: ok one\n"
        b"this line is not journalctl output\n"
        b"2026-11-29T07:00:01.000002+0000 decode-0 python3[1]: ok two\n"
        b"-- Boot 0123456789abcdef0123456789abcdef --\n"
        b"2026-11-29T07:00:01.000003+0000 decode-0 python3[1]: ok three\n"
    )
    res = forensics.ingest([str(f)], db)
    assert res.sources[0].entries == 3
    con = plain(db)
    q = con.execute("SELECT line, reason, raw FROM quarantine").fetchall()
    boots = con.execute("SELECT boot_id FROM entries ORDER BY entry_no").fetchall()
    markers = con.execute("SELECT markers, lines FROM sources").fetchall()
    con.close()
    assert q == [(2, "not a short-iso-precise line", "this line is not journalctl output")]
    assert [b[0] for b in boots] == [None, None, "0123456789abcdef0123456789abcdef"]
    assert markers == [(1, 5)]  # every line is an entry, a quarantined line or a marker


def test_export_damage_is_quarantined(tmp_path: Path, db: Path) -> None:
    good = corpus.export_stream(range(2))
    f = tmp_path / "damaged.export"
    # A binary field whose length runs past its newline, then a good entry again.
    f.write_bytes(good + b"MESSAGE\n\x05\x00\x00\x00\x00\x00\x00\x00abcdefgh\n\n" + good)
    res = forensics.ingest([str(f)], db)
    assert res.sources[0].quarantined == 1
    assert res.sources[0].entries == 4  # within one source, repeats are kept as written


def _big_rendering(tmp_path: Path, lines: int) -> bytes:
    row = "2026-11-29T07:00:{:02d}.{:06d}+0000 decode-0 python3[3001]: step={} rid={}\n"
    return "".join(
        row.format(i // 1_000_000 % 60, i % 1_000_000, i, i) for i in range(lines)
    ).encode()


def test_ingest_killed_mid_way_leaves_database_unchanged(
    renderings, tmp_path: Path, db: Path
) -> None:
    forensics.ingest([str(renderings["export"])], db)
    before = counts(db)
    data = _big_rendering(tmp_path, 800_000)  # ~70 MB: several 16 MB blocks
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", "ingest", str(fifo), "--db", str(db)],
        env={**os.environ, "FORENSICS_PROGRESS_FD": str(w)},
        pass_fds=(w,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(w)
    writer_done = threading.Event()

    def feed() -> None:
        # Hold back the end: the ingest is mid-way, blocked on input, when it is killed.
        try:
            with open(fifo, "wb") as fh:
                fh.write(data[: -(2 << 20)])  # enough for several blocks, not all
                writer_done.wait()
        except BrokenPipeError:
            pass  # the reader was killed while this was still being written: as intended

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        with os.fdopen(r, "rb") as progress:
            first = progress.readline()  # blocks until a batch is written (unregistered)
            # a reader works while the ingest reads: it sees what was registered before
            assert counts(db) == before
            assert cli("report", "--db", str(db)).returncode == 0
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        writer_done.set()
        if t.is_alive():  # the child died before opening the FIFO: let the writer go
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        t.join()
    assert first.startswith(b"batch "), proc.stderr.read() if proc.stderr else b""
    assert proc.returncode == -signal.SIGKILL
    assert counts(db) == before
    left = [p for p in folder(db).iterdir() if p.name.startswith(".ingest-")]
    assert left and any(left[0].rglob("entries-*"))  # what it wrote, never registered
    big = tmp_path / "big.log"
    big.write_bytes(data)
    forensics.ingest([str(big)], db)
    assert counts(db)[:2] == (before[0] + 1, before[1] + 800_000)
    assert not any(p.name.startswith(".ingest-") for p in folder(db).iterdir())  # swept


def test_files_not_registered_are_invisible_and_swept(renderings, tmp_path: Path, db: Path) -> None:
    """The views read the listed files only: a shard renamed into place but never
    registered (an ingest killed between the two) is not read, and the next writer
    removes it."""
    import shutil

    forensics.ingest([str(renderings["json"])], db)
    before = counts(db)
    stray = source_folder(folder(db), 2)
    shutil.copytree(source_folder(folder(db), 1), stray)
    assert counts(db) == before
    proc = cli("sql", f"SELECT count(*) FROM read_parquet('{next(stray.glob('entries-*'))}')",
               "--db", str(db))  # fmt: skip
    assert proc.returncode == 2 and "disabled by configuration" in proc.stderr.decode()
    forensics.ingest([str(renderings["short"])], db)
    assert counts(db)[0] == before[0] + 1
    con = plain(db)
    listed = {r[0] for r in con.execute("SELECT path FROM shards").fetchall()}
    con.close()
    on_disk = {p.relative_to(folder(db)).as_posix() for p in folder(db).rglob("*.parquet")}
    assert on_disk == listed  # the stray copy went; source 2 is the new one's


def test_the_incident_folder_moves_and_opens_from_anywhere(renderings, tmp_path: Path) -> None:
    import shutil

    first = tmp_path / "a" / "incident.duckdb"
    first.parent.mkdir()
    forensics.ingest([str(renderings["json"])], first)
    want = counts(first)
    moved = tmp_path / "elsewhere" / "deeper"
    shutil.move(str(first.parent), str(moved))
    db = moved / "incident.duckdb"
    assert counts(db) == want
    proc = cli("sql", "SELECT count(*) FROM entries", "--db", str(db), "--format", "csv",
               cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.decode().split()[-1] == str(want[1])
    # a plain DuckDB client: the shard folder as its file search path (README)
    con = duckdb.connect(str(db), read_only=True)
    with pytest.raises(duckdb.IOException):
        con.execute("SELECT count(*) FROM entries").fetchall()
    con.execute(f"SET file_search_path = '{moved / 'incident.shards'}'")
    assert con.execute("SELECT count(*) FROM entries").fetchall() == [(want[1],)]
    con.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_parallel_ingest_is_the_serial_one(renderings, tmp_path: Path, workers: int) -> None:
    """Several inputs in worker processes store what one process does, and overlapping
    inputs dedupe in input order whatever order the workers finish in."""
    lines = renderings["json"].read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    (tmp_path / "early.json").write_bytes(b"".join(lines[: half + 3]))
    (tmp_path / "late.json").write_bytes(b"".join(lines[half - 3 :]))
    inputs = [str(tmp_path / "early.json"), str(tmp_path / "late.json"),
              str(renderings["short-iso-precise"])]  # fmt: skip
    serial, par = tmp_path / "serial.duckdb", tmp_path / f"par{workers}.duckdb"
    forensics.ingest(inputs, serial, workers=1)
    res = forensics.ingest(inputs, par, workers=workers + 1)
    assert [s.source_id for s in res.sources] == [1, 2, 3]
    assert res.sources[1].duplicates > 0
    for table in ("entries", "quarantine", "sources"):
        cols = "* EXCLUDE (ingested_at)" if table == "sources" else "*"
        got = {t: forensics.query_rows(f"SELECT {cols} FROM {table} ORDER BY ALL", t)[1]
               for t in (serial, par)}  # fmt: skip
        assert got[serial] == got[par], table


def test_failed_ingest_of_many_files_stores_none(renderings, tmp_path: Path, db: Path) -> None:
    forensics.ingest([str(renderings["export"])], db)
    before = counts(db)
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01\x02binary\x00" * 100)
    proc = cli("ingest", str(renderings["json"]), str(garbage), "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.decode().startswith("error: ") and "unknown format" in proc.stderr.decode()
    assert counts(db) == before


@pytest.mark.parametrize(
    "args,needle",
    [
        (["ingest", "/nonexistent/file.log"], "no such file or directory"),
        (["ingest", "/nonexistent/*.log"], "no file matches"),
        (["ingest", "{src}", "--format", "nope"], "unknown format"),
        (["ingest", "{src}", "--tag", "novalue"], "KEY=VALUE"),
        (["sql", "SELECT * FROM nosuchtable"], "SQL error"),
        (["sql", "DELETE FROM entries"], "sql is read-only"),
    ],
)
def test_bad_input_one_line_exit_2(renderings, db: Path, args: list[str], needle: str) -> None:
    forensics.ingest([str(renderings["short"])], db)
    before = counts(db)
    proc = cli(*[a.replace("{src}", str(renderings["export"])) for a in args], "--db", str(db))
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert counts(db) == before


def test_missing_db_for_queries(tmp_path: Path) -> None:
    proc = cli("sources", "--db", str(tmp_path / "none.duckdb"))
    assert proc.returncode == 2 and "no database" in proc.stderr.decode()
    assert not (tmp_path / "none.duckdb").exists()


@pytest.mark.parametrize("version", [SCHEMA_VERSION + 1, 1])
def test_other_schema_version_refused(renderings, db: Path, version: int) -> None:
    forensics.ingest([str(renderings["short"])], db)
    con = duckdb.connect(str(db))
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    con.close()
    for args in (["ingest", str(renderings["json"])], ["sources"]):
        proc = cli(*args, "--db", str(db))
        assert proc.returncode == 2
        assert f"schema version {version}" in proc.stderr.decode()
    with pytest.raises(ForensicsError):
        forensics.ingest([str(renderings["json"])], db)


def _as_version_2(db: Path) -> None:
    """The database as pd-forensics wrote it at schema 2 (no results.status, a step's
    batch as lists, no stock-evidence tables)."""
    con = duckdb.connect(str(db))
    for view in ("request_evidence", "requests", "canary_writes", "skew", "result_links",
                 "rooms"):  # fmt: skip
        con.execute(f"DROP VIEW IF EXISTS {view}")  # views are reinstalled on every open
    for table in ("req_stats", "request_meta", "events", "scheduler_status"):
        con.execute(f"DROP TABLE {table}")
    con.execute("ALTER TABLE results DROP COLUMN status")
    for col, kind in (("rids", "VARCHAR"), ("rooms", "UBIGINT")):
        con.execute(
            f"ALTER TABLE steps ALTER {col} TYPE {kind}[] USING CASE WHEN {col} = '' "
            f"THEN []::{kind}[] ELSE string_split({col}, ',')::{kind}[] END"
        )
    con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    con.close()


def _steps(db: Path) -> list[tuple]:
    con = plain(db)
    rows = con.execute("SELECT entry_no, rids, rooms FROM steps ORDER BY entry_no").fetchall()
    con.close()
    return rows


def test_version_2_is_upgraded_not_refused(renderings, tmp_path: Path) -> None:
    batches = tmp_path / "decode.log"
    batches.write_text(
        "[2026-11-29 07:00:01 TP0] forensics:step step=1 bs=2 rids=[a,b] rooms=[1,2]\n"
        "[2026-11-29 07:00:02 TP0] forensics:step step=2 bs=0 rids=[] rooms=-\n"
        "[2026-11-29 07:00:03 TP0] forensics:step step=3 bs=1 rids=c\n"
    )
    new = tmp_path / "new.duckdb"
    forensics.ingest([str(renderings["short"]), str(batches)], new)
    steps = _steps(new)
    assert [r[1:] for r in steps] == [("a,b", "1,2"), ("", ""), ("c", None)]
    db = legacy_copy(new, tmp_path / "old.duckdb")  # every row in the file, as at schema 6
    _as_version_2(db)
    proc = cli("sources", "--db", str(db))  # read-only: says how, changes nothing
    assert proc.returncode == 2 and "forensics upgrade" in proc.stderr.decode()
    proc = cli("upgrade", "--db", str(db))
    assert proc.returncode == 0, proc.stderr.decode()
    assert f"schema 2 → schema {SCHEMA_VERSION}" in proc.stdout.decode()
    assert (tmp_path / "old.duckdb.v2").is_file()  # the old file is kept beside it
    assert cli("sources", "--db", str(db)).returncode == 0
    assert _steps(db) == steps  # lists back to the text ingest writes, row for row
    con = plain(db)
    assert "status" in [c[0] for c in con.execute("DESCRIBE results").fetchall()]
    types = dict(con.execute("SELECT column_name, data_type FROM information_schema.columns"
                             " WHERE table_name = 'steps'").fetchall())  # fmt: skip
    assert types["rids"] == types["rooms"] == "VARCHAR"
    for t in ("entries", "checksums", "steps", "quarantine", "batches"):
        assert (con.execute(f"SELECT count(*) FROM {t}").fetchall()
                == plain(new).execute(f"SELECT count(*) FROM {t}").fetchall()), t  # fmt: skip
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] > 0  # nothing lost
    con.close()
    # a writing command upgrades by itself
    other = legacy_copy(new, tmp_path / "other.duckdb")
    _as_version_2(other)
    forensics.ingest([str(renderings["json"])], other)
    con = plain(other)
    version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    assert version == str(SCHEMA_VERSION)
    assert con.execute("SELECT count(*) FROM sources").fetchone()[0] == 3
    con.close()


def test_not_a_database(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("hello")
    proc = cli("ingest", str(bogus), "--db", str(bogus))
    assert proc.returncode == 2 and "cannot open database" in proc.stderr.decode()
    assert bogus.read_text() == "hello"


def test_locked_database(renderings, db: Path) -> None:
    forensics.ingest([str(renderings["short"])], db)
    holder = duckdb.connect(str(db))  # another process's writer holds the lock
    try:
        proc = cli("ingest", str(renderings["json"]), "--db", str(db), "--wait", "0")
        assert proc.returncode == 2
        assert "locked" in proc.stderr.decode()
        # a reader waits FORENSICS_READ_WAIT seconds for a writer registering sources
        proc = cli("report", "--db", str(db), env={"FORENSICS_READ_WAIT": "0"})
        assert proc.returncode == 2 and "locked by another process" in proc.stderr.decode()
    finally:
        holder.close()


def test_runs_and_tags(renderings, db: Path) -> None:
    forensics.ingest([str(renderings["short"])], db, run="flag-on", tags={"overlap": "1"})
    forensics.ingest([str(renderings["json"])], db, run="flag-on", tags={"tp": "8"})
    con = plain(db)
    tags = con.execute("SELECT run, tags FROM runs ORDER BY run").fetchall()
    runs = con.execute("SELECT DISTINCT run FROM sources").fetchall()
    con.close()
    assert tags == [("flag-on", {"overlap": "1", "tp": "8"})]
    assert runs == [("flag-on",)]


def _filled(t):
    """Rows with every column an entries shard has (the rest NULL)."""
    import pyarrow as pa

    from forensics.store.shards import schema

    s = schema("entries", SCHEMA_VERSION)
    return pa.table({f.name: t[f.name] if f.name in t.column_names
                     else pa.nulls(t.num_rows, f.type) for f in s})  # fmt: skip


def test_ingest_imports_pandas_only_where_duckdb_does(tmp_path: Path) -> None:
    """pandas, where installed, costs 0.15 s to import: an ingest needs it no more than
    DuckDB's own scan of an Arrow table does (DuckDB 1.4's imports pyarrow.dataset, which
    loads it; 2.0's does not). pyarrow imports it for scalars and arrays from Python."""
    log = tmp_path / "a.log"  # the text reader; a line quarantined
    log.write_bytes(b"2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: forensics:checksum "
                    b"side=dst room=3 buf=kv full=ab\n" * 3 + b"not journalctl output\n")  # fmt: skip
    (tmp_path / "b.json").write_bytes(  # the readers that build batches from Python values
        b'{"__REALTIME_TIMESTAMP":"1796000000000001","_HOSTNAME":"decode-0",'
        b'"SYSLOG_IDENTIFIER":"python3","_PID":"1","MESSAGE":"hello"}\n'
    )
    (tmp_path / "c.log").write_bytes(
        b"[2026-09-20 14:03:12] Receive: obj=GenerateReqInput(rid='9b1f', bootstrap_room=73)\n"
    )
    (tmp_path / "d.jsonl").write_bytes(
        b'{"session": 3, "round": 1, "rid": "9b1f", "corrupted": true}\n'
    )

    def pandas_after(code: str) -> str:
        code = f"import sys; {code}; print('pandas' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
        return out.stdout.decode().split()[-1]

    duck = pandas_after(  # DuckDB scanning an Arrow table it made (no pyarrow call of ours)
        "import duckdb; con = duckdb.connect(); t = con.sql('SELECT 1 AS a').arrow(); "
        "t = t.read_all() if hasattr(t, 'read_all') else t; "
        "con.from_arrow(t).select('a + 1 AS b').arrow()"
    )
    inputs = [str(tmp_path / n) for n in ("a.log", "b.json", "c.log", "d.jsonl")]
    ingest = f"import forensics; forensics.ingest({inputs!r}, {str(tmp_path / 'x.duckdb')!r})"
    assert pandas_after(ingest) == duck
    con = plain(tmp_path / "x.duckdb")
    formats = con.execute("SELECT format, entries, quarantined FROM sources ORDER BY 1").fetchall()
    con.close()
    assert formats == [("json", 1, 0), ("results-jsonl", 0, 0), ("sglang", 1, 0),
                       ("short-iso-precise", 3, 1)]  # fmt: skip
