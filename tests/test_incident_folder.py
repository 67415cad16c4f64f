"""The incident folder answers the same wherever it lies: folders above it that look like
hive partitions (`host=decode-0/`, `source_id=abc/`, one for every stored column) and a
catalog named like one (`host=x.duckdb`) are never read as data."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from forensics.parsers.tables import SHARDED

import forensics
from forensics.synthetic.planted import generate_planted, write_planted

from .helpers import cli, plain


@pytest.fixture(scope="module")
def inputs(renderings, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A planted incident as the user has it (prefill's and decode's export streams, the
    reproducer's results) and a binary .journal written by systemd-journal-remote."""
    d = tmp_path_factory.mktemp("inputs")
    files = write_planted(generate_planted("host", requests=60, sessions=6), d)
    return [*files, renderings["journal"]]


def _answers(db: Path) -> dict:
    """Every sharded view's rows (count and an order-free hash), the sources' ids and the
    report, as a plain DuckDB client and as forensics read them."""
    con = plain(db)
    try:
        views = {t: con.execute(f"SELECT count(*), sum(hash({t})) FROM {t}").fetchall()[0]
                 for t in SHARDED}  # fmt: skip
    finally:
        con.close()
    rows = forensics.query_rows("SELECT source_id, host, count(*) FROM entries GROUP BY ALL "
                                "ORDER BY ALL", db)[1]  # fmt: skip
    report = cli("report", "--json", "--db", str(db))
    assert report.returncode == 0, report.stderr.decode()
    body = orjson.loads(report.stdout)
    body.pop("db", None)
    return {"views": views, "hosts": rows, "report": _no_paths(body)}


def _no_paths(value):
    """The report without the places it names (the database's and the inputs' paths)."""
    if isinstance(value, dict):
        return {k: _no_paths(v) for k, v in value.items() if k not in ("db", "path")}
    if isinstance(value, list):
        return [_no_paths(v) for v in value]
    return value


@pytest.fixture(scope="module")
def reference(inputs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    db = tmp_path_factory.mktemp("plain") / "inc.duckdb"
    forensics.ingest([str(p) for p in inputs], db, run="incident")
    return _answers(db)


def _every_column_folder() -> Path:
    """One folder for every column of every sharded table, nested."""
    names = sorted({c.name for t in SHARDED.values() for c in t.all_columns})
    return Path(*(f"{n}=7" for n in names))


@pytest.mark.parametrize(
    ("above", "name"),
    [
        (Path("host=decode-0"), "inc.duckdb"),
        (Path("run=zzz") / "rid=r1", "inc.duckdb"),
        (Path("source_id=9"), "inc.duckdb"),
        (Path("source_id=abc"), "inc.duckdb"),
        (Path("a=1") / "b=2", "host=x.duckdb"),
        (_every_column_folder(), "inc.duckdb"),
    ],
    ids=["host", "run-rid", "source_id-9", "source_id-abc", "nested", "every-column"],
)
def test_folders_above_the_incident_are_not_data(
    inputs: list[Path], reference: dict, tmp_path: Path, above: Path, name: str
) -> None:
    where = tmp_path / above
    where.mkdir(parents=True)
    db = where / name
    forensics.ingest([str(p) for p in inputs], db, run="incident")
    assert _answers(db) == reference
    # ... and after the folder is moved under such a path (views written elsewhere)
    moved = tmp_path / "moved" / "source_id=abc" / "host=prefill-9"
    moved.mkdir(parents=True)
    shutil.move(str(db), moved / name)
    shutil.move(str(db.with_name(Path(name).stem + ".shards")), moved)
    assert _answers(moved / name) == reference


def test_a_per_source_scan_opens_only_that_sources_files(
    inputs: list[Path], tmp_path: Path
) -> None:
    db = tmp_path / "host=x" / "inc.duckdb"
    db.parent.mkdir()
    forensics.ingest([str(p) for p in inputs], db, run="incident")
    con = plain(db)
    try:
        n = con.execute("SELECT count(*) FROM shards WHERE table_name = 'entries'").fetchall()[0][0]
        plan = con.execute("EXPLAIN ANALYZE SELECT count(*) FROM entries WHERE source_id = 2")
        text = plan.fetchall()[0][1]
    finally:
        con.close()
    assert n >= 3
    assert f"Scanning Files: 1/{n}" in text, text
