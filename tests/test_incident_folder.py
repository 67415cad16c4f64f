"""The incident folder answers the same wherever it lies: folders above it that look like
hive partitions (`host=decode-0/`, `source_id=abc/`, one for every stored column) and a
catalog named like one (`host=x.duckdb`) are never read as data."""

from __future__ import annotations

import contextlib
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

from .helpers import cli, held_at, plain


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
    body = orjson.loads(orjson.dumps(forensics.report(db).as_dict(), default=str))
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
    """`forensics ingest ARGS` held at `point`."""
    return held_at(point, "ingest", *args)


def _go_on(proc: subprocess.Popen, resume: int) -> subprocess.CompletedProcess:
    os.write(resume, b"x")
    os.close(resume)
    out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def cut_gz(tmp_path: Path) -> Path:
    """A damaged archive (its middle zeroed): refused whole. (One cut short keeps its
    whole lines: not a failing input.)"""
    data = bytearray(gzip.compress(b"2026-11-29T07:00:01.000001+0000 decode-0 python3[1]: x\n"
                                   * 5000))  # fmt: skip
    data[len(data) // 2 : len(data) // 2 + 32] = bytes(32)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(bytes(data))
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
    # by each process's parent in /proc/N/stat: a task's `children` file misses a child
    # whose creating thread (the pool's) has exited
    kids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (d / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(d.name))
    out = []
    for k in kids:
        with contextlib.suppress(OSError):
            fds = [f for f in Path(f"/proc/{k}/fd").iterdir() if f.is_symlink()]
            if any("fifo" in os.readlink(f) for f in fds):
                out.append(k)
    return out


def _mark(db: Path) -> bytes:
    return (db.with_suffix(".shards") / ".identity").read_bytes()


def test_a_catalog_copied_alone_falls_behind_and_only_reads(
    inputs: list[Path], tmp_path: Path
) -> None:
    db, bak = tmp_path / "inc.duckdb", tmp_path / "inc.bak"  # both name inc.shards
    forensics.ingest([str(inputs[0])], db)
    shutil.copy(db, bak)
    forensics.ingest([str(inputs[1])], db)  # the original's next commit
    r = cli("report", "--db", str(bak))
    assert r.returncode == 0, r.stderr
    assert b"opened read-only" in r.stderr and len(r.stderr.decode().strip().splitlines()) == 1
    w = cli("ingest", str(inputs[2]), "--db", str(bak))
    assert w.returncode == 2 and b"forensics copy" in w.stderr, w.stderr
    assert len(w.stderr.decode().strip().splitlines()) == 1
    assert len(forensics.list_sources(db)) == 2 and cli("report", "--db", str(db)).stderr == b""


def test_another_catalog_with_the_same_stem_is_refused(inputs: list[Path], tmp_path: Path) -> None:
    db, other = tmp_path / "x.duckdb", tmp_path / "x.db"
    forensics.ingest([str(inputs[0])], db)
    w = cli("ingest", str(inputs[1]), "--db", str(other))
    assert w.returncode == 2 and b"x.db) is a copy of it" in w.stderr, w.stderr
    assert not other.exists()  # the catalog it made, removed
    assert [s["source_id"] for s in forensics.list_sources(db)] == [1]
    assert cli("verify", "--db", str(db)).returncode == 0


def test_copies_and_renames_of_the_pair(inputs: list[Path], tmp_path: Path) -> None:
    a = tmp_path / "a" / "inc.duckdb"
    a.parent.mkdir()
    forensics.ingest([str(inputs[0])], a)
    whole = tmp_path / "whole"
    shutil.copytree(a.parent, whole, symlinks=True)  # cp -a
    b = whole / "inc.duckdb"
    forensics.ingest([str(inputs[1])], b)
    forensics.ingest([str(inputs[2])], a)
    assert {s["path"] for s in forensics.list_sources(a)} == {str(inputs[0]), str(inputs[2])}
    assert {s["path"] for s in forensics.list_sources(b)} == {str(inputs[0]), str(inputs[1])}
    # renamed by hand: both files
    (tmp_path / "a" / "inc.duckdb").rename(tmp_path / "a" / "new.duckdb")
    (tmp_path / "a" / "inc.shards").rename(tmp_path / "a" / "new.shards")
    moved = tmp_path / "a" / "new.duckdb"
    assert cli("report", "--db", str(moved)).returncode == 0
    forensics.ingest([str(inputs[1])], moved)
    # forensics copy: an identity of its own; forensics mv: the pair
    c = cli("copy", str(tmp_path / "c" / "copy.duckdb"), "--db", str(moved))
    assert c.returncode == 0, c.stderr
    copy = tmp_path / "c" / "copy.duckdb"
    assert _mark(copy) != _mark(moved)
    assert cli("sources", "remove", "1", "--db", str(copy)).returncode == 0
    assert len(forensics.list_sources(moved)) == 3 and len(forensics.list_sources(copy)) == 2
    m = cli("mv", str(tmp_path / "d" / "final.duckdb"), "--db", str(copy))
    assert m.returncode == 0, m.stderr
    assert not copy.exists() and not copy.with_suffix(".shards").exists()
    assert cli("verify", "--db", str(tmp_path / "d" / "final.duckdb")).returncode == 0


def test_the_shard_folder_may_be_a_link(inputs: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    disk = tmp_path / "other-disk" / "inc.shards"
    disk.parent.mkdir()
    shutil.move(db.with_suffix(".shards"), disk)
    db.with_suffix(".shards").symlink_to(disk)
    forensics.ingest([str(inputs[1])], db)
    assert len(forensics.list_sources(db)) == 2
    assert cli("verify", "--db", str(db)).returncode == 0


def test_a_folder_that_missed_the_last_commit_is_mended(inputs: list[Path], tmp_path: Path) -> None:
    """Killed between the commit and the folder's mark: the next open reads without a word
    and the next writer marks the folder."""
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    before = _mark(db)
    forensics.ingest([str(inputs[1])], db)
    (db.with_suffix(".shards") / ".identity").write_bytes(before)
    r = cli("report", "--db", str(db))
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    forensics.ingest([str(inputs[2])], db)
    assert orjson.loads(_mark(db))["generation"] == orjson.loads(before)["generation"] + 2


def _shard(db: Path, source_id: int, table: str = "entries") -> Path:
    return next((db.with_suffix(".shards") / f"source_id={source_id}").glob(f"{table}-*"))


DAMAGE = {
    "deleted": lambda f, other: f.unlink(),
    "truncated": lambda f, other: f.write_bytes(f.read_bytes()[:100]),
    "replaced by another source's file": lambda f, other: shutil.copy(other, f),
    "replaced by another table's file": lambda f, other: shutil.copy(
        next(f.parent.glob("rid_rooms-*")), f
    ),
    "a folder": lambda f, other: (f.unlink(), f.mkdir()),
    "its folder missing": lambda f, other: shutil.rmtree(f.parent),
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_source_is_named(inputs: list[Path], tmp_path: Path, how: str) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0]), str(inputs[1])], db)
    DAMAGE[how](_shard(db, 1), _shard(db, 2))
    for answer in (forensics.report, forensics.rooms, forensics.suspects):
        with pytest.raises(forensics.ForensicsError, match=r"source 1 .*sources remove 1"):
            answer(db)
    assert [bool(s["damaged"]) for s in forensics.list_sources(db)] == [True, False]
    assert forensics.verify(db).damage.sources == {1}
    from forensics.store.sources import relabel_source

    with pytest.raises(forensics.ForensicsError, match=r"source 1 .*sources remove 1"):
        relabel_source(db, 1, host="elsewhere")  # its files cannot be written anew


def test_the_way_out_of_a_damaged_source_works(inputs: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0]), str(inputs[1])], db)
    want = _answers(db)
    DAMAGE["deleted"](_shard(db, 1), _shard(db, 2))
    for cmd in (["report"], ["sql", "SELECT 1"]):
        r = cli(*cmd, "--db", str(db))
        err = r.stderr.decode()
        assert r.returncode == 2 and "source 1" in err and "sources remove 1" in err, err
        assert len(err.strip().splitlines()) == 1
    listed = cli("sources", "--db", str(db))
    assert listed.returncode == 0 and b"damaged" in listed.stdout
    assert cli("verify", "--db", str(db)).returncode == 1
    beside = forensics.ingest([str(inputs[2])], db)  # beside it, and says so
    assert beside.damage and "source 1" in beside.damage, beside.damage
    assert beside.summary and beside.summary.entries == beside.sources[0].entries
    again = forensics.ingest([str(inputs[0])], db)
    assert "sources remove 1" in again.sources[0].reason  # skipped, and said why
    r = cli("sources", "remove", "1", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert forensics.verify(db).clean
    from forensics.store.sources import remove_source

    remove_source(db, 3)
    forensics.ingest([str(inputs[0])], db)
    counted = {t: n for t, (n, _) in _answers(db)["views"].items()}  # under new source ids
    assert counted == {t: n for t, (n, _) in want["views"].items()}


def test_bytes_changed_in_place_are_caught_by_verify(inputs: list[Path], tmp_path: Path) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    f = _shard(db, 1)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: the cheap check on open passes
    f.write_bytes(bytes(data))
    v = cli("verify", "--db", str(db), "--json")
    assert v.returncode == 1
    doc = orjson.loads(v.stdout)
    assert doc["sources"] == [1] and "sha256" in doc["damaged"][0]["why"]


def test_a_registered_path_outside_the_folder_is_never_read_or_deleted(
    inputs: list[Path], tmp_path: Path
) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    secret = tmp_path / "outside.parquet"
    shutil.copy(_shard(db, 1), secret)
    con = plain(db, read_only=False)
    for bad in ("../outside.parquet", str(secret)):
        con.execute("INSERT INTO shards VALUES (?, 1, 'entries', 1, ?, NULL)",
                    [bad, secret.stat().st_size])  # fmt: skip
    con.close()
    r = cli("sql", f"SELECT count(*) FROM read_parquet('{secret}')", "--db", str(db))
    assert r.returncode == 2 and b"outside the shard folder" in r.stderr, r.stderr
    assert cli("sources", "remove", "1", "--db", str(db)).returncode == 0
    assert secret.exists()


def test_a_worker_killed_or_a_full_disk_is_one_line(inputs: list[Path], tmp_path: Path) -> None:
    from concurrent.futures.process import BrokenProcessPool

    import forensics.store.ingest as ingest_mod

    db = tmp_path / "inc.duckdb"
    real = ingest_mod.stage_all

    def broken(*a, **k):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly")

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "x.parquet"))

    for fake, needle in ((broken, "worker reading the inputs died"), (full, "no space left")):
        ingest_mod.stage_all = fake
        try:
            with pytest.raises(forensics.ForensicsError, match=needle) as exc:
                forensics.ingest([str(inputs[0])], db)
        finally:
            ingest_mod.stage_all = real
        assert "\n" not in str(exc.value) and not db.exists()
        assert not db.with_suffix(".shards").exists()  # nothing left of a failed first ingest


def test_csv_takes_every_column_type(tmp_path: Path, inputs: list[Path]) -> None:
    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    q = ("SELECT [1, 2] AS l, {'a': 1} AS s, MAP {'k': 'v'} AS m, union_value(k := 1) AS u, "
         "INTERVAL 1 DAY AS i, '101'::BIT AS b, 'x'::BLOB AS x, 1::VARIANT AS v")  # fmt: skip
    r = cli("sql", q, "--format", "csv", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().splitlines()[0] == "l,s,m,u,i,b,x,v"


def test_a_writer_refuses_where_flock_is_not_enforced(
    inputs: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process is kept out here (the probe, run for real, says so); where it
    would not be (a mount without flock), a writer refuses in one line."""
    from forensics.store import shards

    db = tmp_path / "inc.duckdb"
    forensics.ingest([str(inputs[0])], db)
    shards._ENFORCED.clear()
    # not held: the other process takes it, as it would where flock is not enforced
    assert shards._flock_enforced(tmp_path / "inc.shards" / ".writer") is False
    shards._ENFORCED.clear()
    with shards.writer_lock(tmp_path / "inc.shards"):
        assert shards._ENFORCED[str((tmp_path / "inc.shards").resolve())] is True
    monkeypatch.setattr(shards, "_flock_enforced", lambda lock: False)
    with pytest.raises(forensics.ForensicsError, match="does not enforce flock") as exc:
        forensics.ingest([str(inputs[1])], db)
    assert "\n" not in str(exc.value) and len(forensics.list_sources(db)) == 1
