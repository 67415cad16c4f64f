"""One read scope a command: one connection, the runs checked once, answers reused, the
window as a library argument; `forensics.export` reachable beside the artifacts."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import forensics
from forensics import cli
from forensics.errors import ForensicsError
from forensics.scope import Scope, open_scope


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scope")
    return forensics.demo(d / "inc", db=d / "inc.duckdb").ingest.db


def _in_process(*args: str) -> int:
    try:
        cli.main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize(
    "command",
    [
        ["report"],
        ["report", "--since", "2000-01-01T00:00:00Z"],
        ["suspects"],
        ["rooms"],
        ["compare"],
        ["dashboard", "--out", "{tmp}/d.html"],
        ["trace", "--out", "{tmp}/t.pftrace"],
        ["bundle", "--out", "{tmp}/b.tar.zst"],
        ["sql", "SELECT count(*) FROM entries"],
    ],
    ids=lambda c: "-".join(a for a in c if not a.startswith(("{", "2000"))),
)
def test_a_command_opens_one_connection_and_checks_the_runs_once(
    demo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    connections: list[tuple] = []
    checks: list[object] = []
    real_connect, real_init = duckdb.connect, Scope.__init__

    def counting_connect(*a, **k):
        connections.append(a)
        return real_connect(*a, **k)

    def counting_init(self, *a, **k):
        if k.get("_tags") is None:  # a narrowed scope reuses its parent's look at runs
            checks.append(self)
        real_init(self, *a, **k)

    monkeypatch.setattr(duckdb, "connect", counting_connect)
    monkeypatch.setattr(Scope, "__init__", counting_init)
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert _in_process("--db", str(demo_db), *args) == 0
    assert len(connections) == 1, connections
    assert len(checks) == 1


def test_the_bundle_ranks_suspects_once(demo_db: Path, tmp_path: Path, monkeypatch) -> None:
    from forensics.analyses import suspects as module

    ranked: list[int] = []
    real = module._suspects
    monkeypatch.setattr(module, "_suspects", lambda *a: ranked.append(1) or real(*a))
    forensics.bundle(demo_db, tmp_path / "b.tar.zst")
    assert ranked == [1]


def test_a_scope_is_shared_and_narrowed_without_a_new_connection(demo_db: Path) -> None:
    with open_scope(demo_db) as s:
        rep = forensics.report(s)
        assert forensics.report(s) is rep  # kept
        run = s.runs[0]
        narrow = open_scope(s, run)
        assert narrow.con is s.con and narrow.runs == [run]
        assert forensics.rooms(s, run).counts.keys() <= {run}
        with pytest.raises(ForensicsError, match="no run named 'nope'"):
            open_scope(s, "nope")
    with pytest.raises(duckdb.ConnectionException):
        s.con.execute("SELECT 1")  # the scope owned it: closed


def test_a_connection_handed_in_stays_open(demo_db: Path) -> None:
    con = forensics.connect_read_only(demo_db)
    try:
        forensics.report(con)
        assert con.execute("SELECT 1").fetchall() == [(1,)]
    finally:
        con.close()


def test_the_window_is_a_library_argument(demo_db: Path) -> None:
    whole = forensics.report(demo_db)
    first = min(h.first_ts_us for h in whole.coverage.hosts)
    last = max(h.last_ts_us for h in whole.coverage.hosts)
    mid = (first + last) // 2
    with open_scope(demo_db, since=first) as s:
        assert (
            forensics.report(s).as_dict()["coverage"]["hosts"]
            == whole.as_dict()["coverage"]["hosts"]
        )
    with open_scope(demo_db, until=mid) as s:
        half = forensics.report(s)
        assert sum(h.entries for h in half.coverage.hosts) < sum(
            h.entries for h in whole.coverage.hosts
        )
    with open_scope(demo_db, since="2001-01-01T00:00:00Z", until="2001-01-02T00:00:00Z") as s:
        empty = forensics.report(s)
        said = empty.coverage.sentences()
        assert said[0].startswith("nothing happened in the window (since 2001-01-01")
        assert "the incident spans" in said[0] and "→" in said[0]
        assert empty.coverage.quarantined == 0
    with pytest.raises(ForensicsError, match="--since 'yesterday': not a time"):
        open_scope(demo_db, since="yesterday")


def test_quarantined_lines_are_windowed_by_the_entry_before_them(tmp_path: Path) -> None:
    log = tmp_path / "decode.json"
    entry = '{{"__REALTIME_TIMESTAMP":"{us}","_HOSTNAME":"decode-0","MESSAGE":"{m}"}}\n'
    log.write_text(
        entry.format(us=1_795_935_600_000_000, m="first")
        + "not json, before the window ends\n"
        + entry.format(us=1_795_943_000_000_000, m="two hours later")
        + "not json, after it\n"
    )
    db = tmp_path / "q.duckdb"
    forensics.ingest([str(log)], db, fmt="json")
    whole = forensics.report(db).coverage.quarantined
    cut = 1_795_940_000_000_000
    with open_scope(db, until=cut) as s:
        early = forensics.report(s).coverage.quarantined
    with open_scope(db, since=cut) as s:
        late = forensics.report(s).coverage.quarantined
    assert (whole, early, late) == (2, 1, 1)


def test_export_is_the_sql_export_after_the_artifacts_are_imported(
    demo_db: Path, tmp_path: Path
) -> None:
    forensics.trace(demo_db, tmp_path / "t.pftrace")  # imports forensics.artifacts
    out = tmp_path / "n.csv"
    forensics.export("SELECT 1 AS one", "csv", out, demo_db)
    assert out.read_text().splitlines() == ["one", "1"]
