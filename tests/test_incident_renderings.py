"""The planted incident, through real journals, in every journalctl rendering: `rooms` and
`requests` hold exactly the planted truth whichever rendering the user exported."""

from __future__ import annotations

from pathlib import Path

import pytest

import forensics
from forensics.synthetic import incident
from forensics.synthetic.journal_writer import render, write_journal

from . import corpus

INC = incident.generate(sessions=6, rounds=4, seed=11)


@pytest.fixture(scope="session")
def incident_journals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("incident")
    out: dict[str, list[Path]] = {}
    for host, entries in (("prefill-0", INC.prefill), ("decode-0", INC.decode)):
        src = incident.write_export(entries, root / f"{host}.export")
        out[host] = write_journal(src, root / host / f"{host}.journal")
    return out


@pytest.mark.parametrize("fmt", corpus.TEXT_RENDERINGS + corpus.STRUCTURED_RENDERINGS + ["journal"])
def test_rooms_and_requests_in_every_rendering(
    incident_journals, tmp_path: Path, db: Path, fmt: str
) -> None:
    paths = []
    for host, journals in incident_journals.items():
        if fmt == "journal":
            paths += [str(j) for j in journals]
        else:
            paths.append(str(render(journals, fmt, tmp_path / f"{host}.{fmt}")))
    results = incident.write_results(INC.results, tmp_path / "results.jsonl")
    forensics.ingest([*paths, str(results)], db, run="r")
    truth = INC.truth
    cols, rows = forensics.run_named("rooms", db)
    rooms = {r[cols.index("room")]: dict(zip(cols, r, strict=True)) for r in rows}
    assert {k: v["verdict"] for k, v in rooms.items()} == truth["verdicts"]
    assert {k: v["stale_of"] for k, v in rooms.items() if v["stale_of"]} == truth["stale_of"]
    # identical duplicates are counted; the conflicting pair is counted and judged
    assert {k: v["dst_count"] for k, v in rooms.items() if v["dst_count"]} == truth["dst_count"]
    # transfer failures and the context corruption are attached to their rooms
    events = {v["verdict"] for v in rooms.values() if v["transfer_events"]}
    assert events == {"missing_dst", "conflict"}
    cols, rows = forensics.run_named("requests", db)
    reqs = [dict(zip(cols, r, strict=True)) for r in rows]
    assert sorted(r["rid"] for r in reqs if r["corrupted"]) == truth["corrupted"]
    assert {r["room"]: r["verdict"] for r in reqs} == truth["verdicts"]
    assert sum(r["unexpected_steps"] for r in reqs) == len(truth["burst_steps"])
    _, q = forensics.query_rows("SELECT count(*) FROM quarantine", db)
    assert q == [(0,)]
