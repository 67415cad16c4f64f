"""queries/requests.sql: each harness result with its room's verdict and bad steps."""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.synthetic.incident import generate


def test_demo_requests_hold_the_planted_truth(tmp_path: Path) -> None:
    res = forensics.demo(tmp_path / "inc")
    truth = generate().truth
    cols, rows = forensics.run_named("requests", res.ingest.db)
    reqs = [dict(zip(cols, r, strict=True)) for r in rows]
    assert len(reqs) == len(truth["verdicts"])
    assert sorted(r["rid"] for r in reqs if r["corrupted"]) == truth["corrupted"]
    assert {r["room"]: r["verdict"] for r in reqs} == truth["verdicts"]
    burst = [r for r in reqs if r["unexpected_steps"]]
    assert [r["unexpected_steps"] for r in burst] == [len(truth["burst_steps"])]
    assert burst[0]["corrupted"] and burst[0]["verdict"] == "match"


def test_room_linked_by_rid_when_the_harness_has_none(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "d.log"
    log.write_text(
        "2026-11-29T07:00:01.000000+0000 p python3[1]: forensics:checksum side=src room=42 rid=r1 head=a\n"
        "2026-11-29T07:00:02.000000+0000 d python3[2]: forensics:checksum side=dst room=42 rid=r1 head=b\n"
        "2026-11-29T07:00:03.000000+0000 d python3[2]: forensics:step step=7 rids=r1\n"
        "2026-11-29T07:00:03.000000+0000 d python3[2]: forensics:canary step=7 layer=1 expected=1 changed=[1,9]\n"
    )
    results = tmp_path / "results.csv"
    results.write_text("session,round,rid,ok,reason\ns1,0,r1,false,markup leak\ns1,1,r2,true,\n")
    forensics.ingest([str(log), str(results)], db)
    cols, rows = forensics.run_named("requests", db)
    reqs = {r[cols.index("rid")]: dict(zip(cols, r, strict=True)) for r in rows}
    assert (reqs["r1"]["room"], reqs["r1"]["verdict"], reqs["r1"]["corrupted"]) == (
        42,
        "mismatch",
        True,
    )
    # expected given as a count: nothing to subtract, so no unexpected pages are known
    assert reqs["r1"]["unexpected_steps"] == 0
    assert (reqs["r2"]["room"], reqs["r2"]["verdict"], reqs["r2"]["corrupted"]) == (
        None,
        None,
        False,
    )
