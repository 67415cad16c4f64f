"""Runs as the user named them: --run wins over a results file's headers, a run holding
another file's results is refused, `forensics runs` lists, renames and merges (tags kept),
`sources relabel` keeps the run's tags. Journals from the demo: the real journalctl's
rendering of a real .journal where systemd-journal-remote is installed (CI installs it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import forensics
from forensics.analyses.runs import list_runs
from forensics.errors import ForensicsError
from forensics.store.runs import rename_run
from forensics.store.sources import relabel_source

from .helpers import cli, counts


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("runs")
    demo = forensics.demo(d / "inc", db=d / "demo.duckdb")
    assert demo.real_journal  # the decode journal went through systemd-journal-remote
    rows = (d / "inc" / "results.jsonl").read_text().splitlines()
    header = {"forensics_run": "repro", "tags": {"sessions": "32"}, "url": "http://x"}

    def results(name: str, heads: list[dict], body: list[str]) -> Path:
        p = d / name
        p.write_text("".join(json.dumps(h) + "\n" for h in heads) + "\n".join(body) + "\n")
        return p

    sweep = [{"forensics_run": "repro-s10"}, {"forensics_run": "repro-s20"}]
    return {
        "prefill": d / "inc" / "prefill-0.export",
        "decode": d / "inc" / "decode-0.log",
        "results": results("results.jsonl", [header], rows),
        "again": results("again.jsonl", [header], rows[: len(rows) // 2]),
        "sweep": _sweep(d / "sweep.jsonl", sweep, rows),
    }


def _sweep(p: Path, heads: list[dict], rows: list[str]) -> Path:
    half = len(rows) // 2
    p.write_text("\n".join([json.dumps(heads[0]), *rows[:half], json.dumps(heads[1]),
                            *rows[half:]]) + "\n")  # fmt: skip
    return p


def _ingest(db: Path, inputs: dict[str, Path], *names: str, run: str | None = None):
    return forensics.ingest([str(inputs[n]) for n in names], db, run=run)


def test_run_given_wins_over_the_header(inputs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "i.duckdb"
    _ingest(db, inputs, "prefill", "decode", run="incident")
    res = _ingest(db, inputs, "results", run="incident")
    assert "--run wins over the file's headers: repro as incident" in res.sources[0].notes
    assert [r["run"] for r in list_runs(db)] == ["incident"]
    assert list_runs(db)[0]["tags"]["sessions"] == "32"  # the header's tags, under its name
    rate = forensics.compare(db, "incident").rates[0]
    assert rate.requests > 0
    r = cli("--db", str(db), "suspects", "--run", "incident", text=True)
    assert r.returncode == 0 and "no judged harness request" not in r.stdout


def test_without_run_the_header_names_it(inputs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "h.duckdb"
    res = _ingest(db, inputs, "results")
    assert res.sources[0].notes == ["runs from the file's headers: repro"]
    assert {r["run"] for r in list_runs(db) if r["judged"]} == {"repro"}


def test_a_run_holding_another_files_results_is_refused(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    db = tmp_path / "r.duckdb"
    _ingest(db, inputs, "results")
    before = counts(db)
    with pytest.raises(ForensicsError, match=r"run 'repro' already holds the results of source 1"):
        _ingest(db, inputs, "again")
    assert counts(db) == before  # nothing of it registered
    r = cli("--db", str(db), "ingest", str(inputs["again"]), text=True)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "--run" in r.stderr and "Traceback" not in r.stderr
    _ingest(db, inputs, "again", run="second")  # named apart: taken
    judged = {r["run"]: r["judged"] for r in list_runs(db)}
    assert judged["second"] < judged["repro"]


def test_two_files_of_one_ingest_naming_one_run_are_refused(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    db = tmp_path / "t.duckdb"
    with pytest.raises(ForensicsError, match="already holds the results of"):
        _ingest(db, inputs, "results", "again")
    assert not db.exists() or counts(db)[0] == 0


def test_a_sweeps_runs_keep_their_suffixes(inputs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    res = _ingest(db, inputs, "sweep", run="flag-on")
    assert "repro-s10 as flag-on-s10" in res.sources[0].notes[0]
    assert [r["run"] for r in list_runs(db)] == ["flag-on", "flag-on-s10", "flag-on-s20"]


def test_runs_rename_and_merge_keep_tags(inputs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "m.duckdb"
    _ingest(db, inputs, "prefill", "decode", run="incident")
    _ingest(db, inputs, "results")  # run repro, tags from its header
    judged = {r["run"]: r["judged"] for r in list_runs(db)}
    with pytest.raises(ForensicsError, match="run 'incident' exists: `forensics runs merge"):
        rename_run(db, "repro", "incident")
    res = rename_run(db, "repro", "harness")
    assert res["changed"] == {"results.run": judged["repro"] + _no_reply(db, "harness")}
    runs = _runs(db)
    assert set(runs) == {"incident", "harness"} and runs["harness"]["tags"]["sessions"] == "32"
    r = cli("--db", str(db), "runs", "merge", "harness", "incident", "--json", text=True)
    assert r.returncode == 0, r.stderr
    runs = _runs(db)
    assert set(runs) == {"incident"}
    assert runs["incident"]["judged"] == judged["repro"]
    assert runs["incident"]["tags"]["sessions"] == "32"
    r = cli("--db", str(db), "runs", "rename", "nope", "x", text=True)
    assert r.returncode != 0 and "no run named 'nope'" in r.stderr


def _runs(db: Path) -> dict[str, dict]:
    """The runs but `default`: the run of a results file's source when --run is not given
    (its rows are in their headers' runs)."""
    return {r["run"]: r for r in list_runs(db) if r["run"] != "default"}


def _no_reply(db: Path, run: str) -> int:
    rows = forensics.query(
        f"SELECT count(*) AS n FROM results WHERE run = '{run}' AND status IN "
        "('http_error', 'timeout')",
        db,
    )
    return int(rows["n"][0])


def test_relabel_keeps_the_runs_tags(inputs: dict[str, Path], tmp_path: Path) -> None:
    db = tmp_path / "l.duckdb"
    res = _ingest(db, inputs, "results")
    relabel_source(db, res.sources[0].source_id, run="moved")
    runs = _runs(db)
    assert set(runs) == {"moved"} and runs["moved"]["tags"]["sessions"] == "32"
