"""The installed command: every subcommand documented, outputs parseable."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from forensics.cli import app

from . import corpus
from .helpers import cli


def test_every_command_has_help_with_an_example() -> None:
    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    names += [g.name for g in app.registered_groups]  # `sources` and its subcommands
    assert {"ingest", "sources", "sql", "demo"} <= set(names)
    for name in names:
        proc = cli(name, "--help")
        assert proc.returncode == 0
        assert "Example:" in proc.stdout.decode(), name


def test_ingest_json_summary(renderings, db: Path) -> None:
    proc = cli("ingest", str(renderings["json"]), str(renderings["short"]), "--db", str(db),
               "--run", "a", "--tag", "flag=on", "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert doc["run"] == "a"
    assert [s["format"] for s in doc["sources"]] == ["json", "short"]
    # short and json of one journal are one set of entries: the second adds none
    assert doc["summary"]["entries"] == len(corpus.expected())
    assert doc["sources"][1]["duplicates"] == len(corpus.expected())
    hosts = {r["host"] for r in doc["summary"]["per_stream"]}
    assert hosts == {"prefill-0", "decode-0"}


def test_ingest_text_summary_names_hosts_and_span(renderings, db: Path) -> None:
    proc = cli("ingest", str(renderings["short-iso-precise"]), "--db", str(db))
    text = proc.stdout.decode()
    assert "decode-0" in text and "prefill-0" in text
    assert "time span: 2026-11-29 07:00:00.000Z" in text
    assert "quarantined lines: 0" in text


def test_sql_formats(renderings, db: Path, tmp_path: Path) -> None:
    cli("ingest", str(renderings["export"]), "--db", str(db))
    q = "SELECT host, count(*) AS n FROM entries GROUP BY host ORDER BY host"
    as_csv = cli("sql", q, "--format", "csv", "--db", str(db)).stdout.decode()
    assert list(csv.reader(io.StringIO(as_csv))) == [
        ["host", "n"],
        ["decode-0", "10"],
        ["prefill-0", "4"],
    ]
    as_json = orjson.loads(cli("sql", q, "--format", "json", "--db", str(db)).stdout)
    assert as_json == [{"host": "decode-0", "n": 10}, {"host": "prefill-0", "n": 4}]
    out = tmp_path / "r.parquet"
    proc = cli("sql", q, "--format", "parquet", "--out", str(out), "--db", str(db))
    assert proc.returncode == 0
    assert pq.read_table(out).to_pylist() == as_json
    table = cli("sql", q, "--db", str(db)).stdout.decode()
    assert "decode-0" in table and "prefill-0" in table


def test_sources_lists_sha_and_counts(renderings, db: Path) -> None:
    cli("ingest", str(renderings["json"]), "--db", str(db))
    rows = orjson.loads(cli("sources", "--json", "--db", str(db)).stdout)
    assert len(rows) == 1
    assert rows[0]["format"] == "json" and rows[0]["entries"] == len(corpus.expected())
    assert len(rows[0]["sha256"]) == 64


def test_db_from_environment(renderings, tmp_path: Path) -> None:
    db = tmp_path / "env.duckdb"
    proc = cli("ingest", str(renderings["json"]), env={"FORENSICS_DB": str(db)})
    assert proc.returncode == 0 and db.exists()


def test_db_before_the_command_and_the_missing_database_names_both_ways(
    renderings, tmp_path: Path
) -> None:
    db = tmp_path / "before.duckdb"
    assert cli("--db", str(db), "ingest", str(renderings["json"])).returncode == 0
    assert db.exists()
    proc = cli("--db", str(db), "sources", "--json")
    assert proc.returncode == 0 and orjson.loads(proc.stdout)[0]["format"] == "json"
    # given after the command too, that one wins
    proc = cli("--db", str(tmp_path / "none.duckdb"), "sources", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    proc = cli("rooms", cwd=tmp_path, env={"FORENSICS_DB": ""})
    assert proc.returncode == 2
    assert b"--db PATH" in proc.stderr and b"FORENSICS_DB" in proc.stderr


def test_demo_says_how_to_point_at_its_database(tmp_path: Path) -> None:
    proc = cli("demo", "--dir", str(tmp_path / "inc"))
    assert proc.returncode == 0, proc.stderr
    db = tmp_path / "inc" / "forensics.duckdb"
    assert f"export FORENSICS_DB={db}".encode() in proc.stdout.replace(b"\n", b"")
    assert (tmp_path / "inc" / "decode-0.pt.trace.json").exists()


def test_demo_runs_and_ingests_both_hosts(tmp_path: Path) -> None:
    proc = cli("demo", "--dir", str(tmp_path / "inc"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert {s["format"] for s in doc["sources"]} == {"export", "short-iso-precise", "results-jsonl"}
    assert {r["host"] for r in doc["summary"]["per_stream"]} == {"prefill-0", "decode-0"}
    assert doc["summary"]["quarantined"] == 0
    assert (tmp_path / "inc" / "results.jsonl").exists()
    said = doc["report"]["conclusions"]
    assert said[: len(doc["report"]["headline"])] == doc["report"]["headline"]
    assert said[len(doc["report"]["headline"])].startswith("inputs: ")
    assert doc["dashboard"]["path"] == str(tmp_path / "inc" / "dashboard.html")
    assert doc["dashboard"]["panels"] == ["writes", "requests", "pages", "failures", "verdicts"]


def test_query_list_and_run(tmp_path: Path) -> None:
    cli("demo", "--dir", str(tmp_path / "inc"))
    db = str(tmp_path / "inc" / "forensics.duckdb")
    listing = cli("query", "--list", "--db", db).stdout.decode()
    assert "rooms" in listing and "verdict" in listing
    rows = orjson.loads(cli("query", "rooms", "--format", "json", "--db", db).stdout)
    assert {r["verdict"] for r in rows} == {
        "match",
        "partial",
        "stale",
        "mismatch",
        "missing_dst",
        "missing_src",
        "conflict",
    }
    bad = cli("query", "nope", "--db", db)
    assert bad.returncode == 2 and "no query named 'nope'" in bad.stderr.decode()


def test_terminal_tables_show_the_first_rows_and_say_how_many_more(tmp_path: Path) -> None:
    cli("demo", "--dir", str(tmp_path / "inc"))
    db = str(tmp_path / "inc" / "forensics.duckdb")
    hundred = "SELECT range AS i FROM range(100) ORDER BY i"
    text = cli("sql", hundred, "--db", db).stdout.decode()
    assert "│ 39 │" in text and "│ 40 │" not in text  # the first 40, in order
    assert "… 60 more rows (100 in all): --format csv" in text
    text = cli("sql", hundred, "--db", db, "--limit", "5").stdout.decode()
    assert "│ 4 │" in text and "│ 5 │" not in text and "… 95 more rows" in text
    assert "more rows" not in cli("sql", hundred, "--db", db, "--limit", "100").stdout.decode()
    lines = cli("sql", hundred, "--db", db, "--format", "csv", "--limit", "3").stdout.decode()
    assert lines.split() == ["i", "0", "1", "2"]
    assert len(cli("sql", hundred, "--db", db, "--format", "csv").stdout.split()) == 101
    rooms = cli("query", "rooms", "--db", db, "--limit", "2").stdout.decode()
    assert "more rows" in rooms
    bad = cli("sql", hundred, "--db", db, "--limit", "-1")
    assert bad.returncode == 2 and "--limit" in bad.stderr.decode()


def test_json_keeps_room_ids_whole_as_strings(tmp_path: Path) -> None:
    assert cli("demo", "--dir", str(tmp_path / "inc")).returncode == 0
    db = str(tmp_path / "inc" / "forensics.duckdb")
    doc = orjson.loads(cli("rooms", "--db", db, "--json").stdout)
    rooms = [r["room"] for r in doc["worst"]]
    assert rooms and all(isinstance(r, str) and int(r) > 2**53 for r in rooms)
    ((want,),) = forensics_rows(db, "SELECT max(room)::VARCHAR FROM rooms")
    out = cli("sql", "SELECT max(room) AS room FROM rooms", "--db", db, "--format", "json")
    assert orjson.loads(out.stdout)[0]["room"] == want
    small = cli("sql", "SELECT 42 AS n", "--db", db, "--format", "json")
    assert orjson.loads(small.stdout)[0]["n"] == 42  # small integers stay numbers


def forensics_rows(db: str, sql: str) -> list[tuple]:
    import forensics

    return forensics.query_rows(sql, db)[1]


def test_ingest_help_names_every_input_form() -> None:
    from forensics.parsers.formats import FORMATS

    raw = cli("ingest", "--help").stdout
    text = re.sub(rb"-\s+", b"-", b" ".join(raw.split()))  # help wraps at a word's hyphen
    for form in [f for f in FORMATS if not f.startswith("results")]:
        assert form.encode() in text, form
    for word in (b".journal", b"docker", b"kubectl", b"results", b".zst", b"stdin"):
        assert word in text


def test_terminal_tables_show_times_as_utc_and_ids_whole(tmp_path: Path) -> None:
    assert cli("demo", "--dir", str(tmp_path / "inc")).returncode == 0
    db = str(tmp_path / "inc" / "forensics.duckdb")
    wide = {"COLUMNS": "400"}
    (room, ts), = forensics_rows(db, "SELECT room::VARCHAR, src_ts_us FROM rooms "
                                     "ORDER BY src_ts_us LIMIT 1")  # fmt: skip
    first = "SELECT * FROM rooms ORDER BY src_ts_us LIMIT 1"  # a view's rows have no order
    text = cli("sql", first, "--db", db, env=wide).stdout.decode()
    assert room in text and str(ts) not in text
    from forensics.timefmt import iso_us

    assert iso_us(ts) in text
    # a narrow terminal folds a long id onto more lines, never cuts it
    narrow = cli("query", "rooms", "--db", db, "--limit", "1", env={"COLUMNS": "80"}).stdout
    cells = [ln for ln in narrow.decode().splitlines() if ln.startswith(("│", "┃"))]
    assert cells and not any("…" in ln for ln in cells)
    listing = cli("query", "--list", env=wide).stdout.decode()
    assert "logged about it and around it — no probe records needed." in listing


def test_python_query_returns_a_polars_frame_with_rooms_whole(tmp_path: Path) -> None:
    import polars as pl

    import forensics

    forensics.demo(tmp_path / "inc")
    db = tmp_path / "inc" / "forensics.duckdb"
    df = forensics.query("SELECT room, verdict FROM rooms ORDER BY room", db)
    assert isinstance(df, pl.DataFrame) and df.schema["room"] == pl.UInt64
    cols, rows = forensics.query_rows("SELECT room, verdict FROM rooms ORDER BY room", db)
    assert cols == ["room", "verdict"] and df.rows() == rows
