"""The incident folder answers the same wherever it lies: folders above it that look like
hive partitions (`host=decode-0/`, `source_id=abc/`, one for every stored column) and a
catalog named like one (`host=x.duckdb`) are never read as data."""

from __future__ import annotations

import gzip
import os
import select
import shutil
import subprocess
import sys
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


def _held(args: list[str], point: str) -> tuple[subprocess.Popen, int]:
    """`forensics ingest ARGS` run until it reaches `point` (forensics/store/points.py),
    held there: the process and the pipe end that lets it go on."""
    reached_r, reached_w = os.pipe()
    resume_r, resume_w = os.pipe()
    env = {**os.environ, "FORENSICS_PAUSE_AT": point, "FORENSICS_PAUSE_FD": str(reached_w),
           "FORENSICS_RESUME_FD": str(resume_r)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "ingest", *args], env=env,
                            pass_fds=(reached_w, resume_r), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    os.close(reached_w)
    os.close(resume_r)
    with os.fdopen(reached_r, "rb") as fh:
        assert fh.readline() == f"{point}\n".encode(), proc.communicate()
    return proc, resume_w


def _go_on(proc: subprocess.Popen, resume: int) -> subprocess.CompletedProcess:
    os.write(resume, b"x")
    os.close(resume)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def cut_gz(tmp_path: Path) -> Path:
    data = gzip.compress(b"2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: x\n" * 5000)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: len(data) // 2])
    return cut


@pytest.mark.parametrize("first", ["good", "failing"])
def test_a_failed_first_ingest_removes_only_what_it_made(
    inputs: list[Path], cut_gz: Path, tmp_path: Path, first: str
) -> None:
    """Two first ingests into a new folder, one failing on its own input: whichever
    reaches the point where the old code decided it made the catalog first, the good
    one's catalog survives the failing one."""
    db = tmp_path / "inc.duckdb"
    good = [*(str(p) for p in inputs), "--db", str(db)]
    failing = [str(cut_gz), "--db", str(db)]
    held, other = (good, failing) if first == "good" else (failing, good)
    proc, resume = _held(held, "ingest-start")
    ran = cli("ingest", *other, "--wait", "60")
    done = _go_on(proc, resume)
    by = {"good": done if first == "good" else ran, "failing": ran if first == "good" else done}
    assert by["good"].returncode == 0, by["good"].stderr
    assert by["failing"].returncode == 2 and b"cut.log.gz" in by["failing"].stderr
    assert [s["path"] for s in forensics.list_sources(db)] == [str(p) for p in inputs]


def test_a_catalog_made_and_then_failed_is_removed_under_the_writer_lock(
    inputs: list[Path], tmp_path: Path
) -> None:
    """The ingest that made the catalog, held there; another waits for the writer lock
    and registers into the catalog only after the first is done."""
    db = tmp_path / "inc.duckdb"
    proc, resume = _held([str(inputs[0]), "--db", str(db)], "catalog-opened")
    waiting = subprocess.Popen([sys.executable, "-m", "forensics", "ingest", str(inputs[1]),
                                "--db", str(db), "--wait", "120"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)  # fmt: skip
    assert waiting.stderr is not None
    assert b"waiting up to 120 s" in waiting.stderr.readline()  # it is blocked now
    done = _go_on(proc, resume)
    _, err = waiting.communicate(timeout=300)
    assert done.returncode == 0 and waiting.returncode == 0, (done.stderr, err)
    assert len(forensics.list_sources(db)) == 2


def test_the_sweep_never_follows_a_link(inputs: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "entries-keep.parquet"
    precious.write_bytes(b"PAR1 not ours")
    (outside / "x.parquet.tmp").write_bytes(b"")
    shards = tmp_path / "inc.shards"
    (shards / "source_id=99").symlink_to(outside)
    (shards / "source_id=1" / "entries-link.parquet").symlink_to(precious)
    (shards / ".ingest-1-dead").symlink_to(outside)
    forensics.ingest([str(inputs[1])], db)
    assert precious.read_bytes() == b"PAR1 not ours" and (outside / "x.parquet.tmp").exists()
    assert not any(p.is_symlink() for p in shards.rglob("*"))
    assert len(forensics.list_sources(db)) == 2


def test_workers_die_with_their_parent(tmp_path: Path) -> None:
    """The ingest killed while its workers read: they exit too (no idle workers left)."""
    fifos = [tmp_path / f"in{i}.fifo" for i in range(2)]
    for f in fifos:
        os.mkfifo(f)
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "ingest", *map(str, fifos),
                             "--workers", "2", "--db", str(tmp_path / "w.duckdb")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    writers = [open(f, "wb") for f in fifos]  # returns once a worker opened each  # noqa: SIM115
    try:
        workers = _children(proc.pid)
        assert len(workers) >= 2
        fds = [os.pidfd_open(pid) for pid in workers]
        proc.kill()
        proc.wait()
        for fd in fds:  # readable once that process has exited
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "a worker outlived its parent"
    finally:
        for w in writers:
            w.close()


def _children(pid: int) -> list[int]:
    """The processes `pid` started that read (the spawned workers; not the resource
    tracker, which has no input open)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return [k for k in kids if any("fifo" in os.readlink(f) for f in
                                   Path(f"/proc/{k}/fd").iterdir() if f.is_symlink())]  # fmt: skip
