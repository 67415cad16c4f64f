"""PyTorch Flight Recorder dumps (issue 54): read as data only, each entry a `collectives`
row, and the report names the rank that stopped first."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

from forensics.parsers import flight_recorder as fr

import forensics
from tests.helpers import cli

DATA = Path(__file__).parent / "data" / "flight-recorder"


def _dump(last: int, time_ns: int = 1_789_913_000_000_000_000) -> dict:
    """A dump in torch's format (torch/csrc/distributed/c10d/FlightRecorder.hpp, version
    2.4's keys): all_reduce after all_reduce, every one completed but the last."""
    entries = [{
        "record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
        "profiling_name": "nccl:all_reduce", "time_created_ns": time_ns + seq * 1_000_000,
        "input_sizes": [[2, 2]], "input_dtypes": ["Float"], "output_sizes": [[2, 2]],
        "output_dtypes": ["Float"], "state": "completed" if seq < last else "scheduled",
        "duration_ms": None, "timeout_ms": 10_000, "retired": seq < last, "is_p2p": False,
        "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "frames": [{"name": "all_reduce", "filename": "train.py", "line": 12}],
    } for seq in range(1, last + 1)]  # fmt: skip
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg",
            "ranks": "[0, 1]"}}, "pg_status": {}, "entries": entries}  # fmt: skip


def test_the_rank_that_stopped_first_is_named(tmp_path: Path) -> None:
    """Rank 1 never enqueued collective 13: the report says it stopped first, at seq 12;
    the entries are `collectives` rows, none of them a failure."""
    for rank, last in ((0, 13), (1, 12)):
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(_dump(last), 2))
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(tmp_path / "nccl_trace_rank_0"), str(tmp_path / "nccl_trace_rank_1")],
                     db, host="trainer-0")  # fmt: skip
    _, rows = forensics.query_rows(
        "SELECT rank, count(*), max(seq), min(ts_us) FROM collectives WHERE state <> 'group' GROUP BY ALL ORDER BY 1",
        db)  # fmt: skip
    assert rows == [(0, 13, 13, 1_789_913_000_001_000), (1, 12, 12, 1_789_913_000_001_000)]
    _, fails = forensics.query_rows("SELECT count(*) FROM failures", db)
    assert fails == [(0,)]
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)
    (stopped,) = got["flight_recorder"]["stopped"]
    assert (stopped["rank"], stopped["seq"], stopped["others"]) == (1, 12, 13)
    # no harness results: the verdict says so, the rank the others waited on comes next
    assert got["headline"][0] == got["verdict"]["statement"] and got["verdict"]["kind"] == "none"
    assert got["headline"][1].startswith("flight recorder: rank 1 stopped first in")
    assert stopped["behind"] == 1 and "the furthest of the 2 ranks dumped reached seq 13" in (
        got["headline"][1])  # fmt: skip


def test_a_pickle_that_is_code_is_refused_in_one_line(tmp_path: Path) -> None:
    """A pickle whose reduce calls os.system, and one naming a class outside the builtins:
    each refused and quarantined in one line, nothing run, the good dump beside them kept."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = {"version": "2.4", "entries": [Evil()]}
    (tmp_path / "nccl_trace_rank_2").write_bytes(pickle.dumps(evil, 2))
    odd = {"version": "2.4", "entries": [], "when": Path("/x")}  # pathlib's class
    (tmp_path / "nccl_trace_rank_3").write_bytes(pickle.dumps(odd, 2))
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(_dump(3), 2))
    cut = pickle.dumps(_dump(3), 2)
    (tmp_path / "nccl_trace_rank_4").write_bytes(cut[: len(cut) // 2])
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(p) for p in sorted(tmp_path.glob("nccl_trace_rank_*"))], db,
                     host="trainer-0")  # fmt: skip
    assert not marker.exists()
    _, bad = forensics.query_rows(
        "SELECT s.path, q.line, q.reason FROM quarantine q JOIN sources s USING (source_id) "
        "ORDER BY s.path", db)  # fmt: skip
    reasons = {Path(p).name: (line, reason) for p, line, reason in bad}
    assert reasons["nccl_trace_rank_2"][1] == (
        "flight-recorder: the pickle names posix.system: refused (a Flight Recorder dump "
        "holds only builtin values)")  # fmt: skip
    assert "pathlib" in reasons["nccl_trace_rank_3"][1]
    assert reasons["nccl_trace_rank_4"][1].startswith("flight-recorder: not a readable dump")
    assert all(line == 1 and "\n" not in r for line, r in reasons.values())
    _, kept = forensics.query_rows(
        "SELECT rank, count(*) FROM collectives WHERE state <> 'group' GROUP BY ALL", db
    )
    assert kept == [(0, 3)]


def test_sniffing_a_dump_needs_its_keys() -> None:
    assert fr.sniff(pickle.dumps(_dump(1), 2)[:4096]) == "flight-recorder"
    assert fr.sniff(pickle.dumps({"other": 1}, 2)) is None
    assert fr.sniff(b"entries are plain text") is None


def test_the_docs_say_every_key() -> None:
    from dataclasses import fields

    from forensics.analyses.flight import Stopped

    doc = (Path(__file__).parents[1] / "docs" / "investigations.md").read_text()
    section = doc[doc.index("### `flight_recorder`") :]
    section = section[: section.index("\n### ", 5)]
    for f in fields(Stopped):
        assert f"`{f.name}`" in section, f.name
    assert "`dumps`" in section and "`stopped`" in section


DUMPS = Path(__file__).parent / "data" / "flight-recorder"  # written by torch (README.md)


def test_dumps_torch_wrote_name_the_rank_that_skipped_a_collective(tmp_path: Path) -> None:
    """Two ranks' dumps as torch 2.13 wrote them (the pickle and the JSON form): rank 1
    skipped the fourth all_reduce, so it stopped first, at seq 3."""
    for form, names in (("pickle", ["nccl_trace_rank_0", "nccl_trace_rank_1"]),
                        ("json", ["fr_trace_rank_0.json", "fr_trace_rank_1.json"])):  # fmt: skip
        db = tmp_path / f"{form}.duckdb"
        forensics.ingest([str(DUMPS / n) for n in names], db, host="trainer-0")
        _, fmt = forensics.query_rows("SELECT DISTINCT format FROM sources", db)
        assert fmt == [("flight-recorder",)]
        _, rows = forensics.query_rows(
            "SELECT rank, count(*), max(seq), any_value(op) FROM collectives WHERE state <> 'group' GROUP BY ALL "
            "ORDER BY 1", db)  # fmt: skip
        assert rows == [(0, 4, 4, "gloo:all_reduce"), (1, 3, 3, "gloo:all_reduce")], form
        (stopped,) = forensics.report(db).flight.stopped
        assert (stopped.rank, stopped.seq, stopped.others, stopped.pg) == (1, 3, 4, 0)


def test_ranks_tied_behind_are_said_as_one_of_them(tmp_path: Path) -> None:
    """Three ranks, two of them stuck at seq 5 and one at 6: neither of the two is said to
    have stopped first alone, and the furthest rank's seq is the one said."""
    for rank, last in ((0, 6), (1, 5), (2, 5)):  # each rank's clock its own: no two alike
        dump = _dump(last, time_ns=1_789_913_000_000_000_000 + rank * 1_000)
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump, 2))
    db = tmp_path / "f.duckdb"
    forensics.ingest([str(p) for p in sorted(tmp_path.glob("nccl_trace_rank_*"))], db,
                     host="trainer-0")  # fmt: skip
    said = forensics.report(db).flight.sentences()
    assert [s.split(":")[1].strip() for s in said] == [
        "rank 1 is one of 2 ranks that stopped first in process group 0",
        "rank 2 is one of 2 ranks that stopped first in process group 0"]  # fmt: skip
    assert all(s.endswith("the furthest of the 3 ranks dumped reached seq 6") for s in said)


def test_a_rank_its_group_lists_and_no_dump_came_from_is_named(tmp_path: Path) -> None:
    """Two of torch's own JSON dumps (2.13, FlightRecorder.hpp 2.10 keys) whose group's
    members, a string of a list as torch writes pg_config's `ranks`, name a third rank:
    `missing_ranks` is [2], a sentence names it; each group's status is a `collectives`
    row of state group (the default group's name "" and its id "0" paired)."""
    names = []
    for rank in (0, 1):
        dump = json.loads((DATA / f"fr_trace_rank_{rank}.json").read_text())
        dump["pg_config"] = {k: {**v, "ranks": "[0, 1, 2]"} for k, v in dump["pg_config"].items()}
        names.append(tmp_path / f"fr_trace_rank_{rank}.json")
        names[-1].write_text(json.dumps(dump))
    db = tmp_path / "m.duckdb"
    forensics.ingest([str(n) for n in names], db, host="trainer-0")
    _, groups = forensics.query_rows(
        "SELECT rank, pg, ranks, last_enqueued, last_started, last_completed FROM collectives "
        "WHERE state = 'group' ORDER BY rank", db)  # fmt: skip
    assert groups == [(0, 0, "0,1,2", 4, -1, 3), (1, 0, "0,1,2", 3, -1, 3)]
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)
    assert got["flight_recorder"]["missing_ranks"] == [2]
    assert any(s.startswith("flight recorder: rank 2 of the process groups the dumps list "
                            "left no dump") for s in got["conclusions"])  # fmt: skip
    alone = tmp_path / "a.duckdb"
    forensics.ingest([str(DATA / "fr_trace_rank_0.json"), str(DATA / "fr_trace_rank_1.json")],
                     alone, host="trainer-0")  # fmt: skip
    got = json.loads(cli("report", "--db", str(alone), "--json").stdout)
    assert got["flight_recorder"]["missing_ranks"] == []
