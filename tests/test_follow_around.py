"""`follow --around` shows the lines `suspects` blames: the top suspect of a planted
incident is a line no pattern reads, and it is among the events around the request."""

from __future__ import annotations

import json
from pathlib import Path

import forensics
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli


def test_the_blamed_line_is_around_the_request(tmp_path: Path) -> None:
    inc = generate_planted("line", seed=0, lag_s=0.8, side="decode")
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    top = json.loads(cli("suspects", "--db", str(db), "--json").stdout)["suspects"][0]
    assert top["feature"].startswith("line ") and top["verdict"] == "suspect"
    rid = inc.truth["caused"][0]
    got = json.loads(cli("follow", rid, "--around", "2", "--db", str(db), "--json").stdout)
    around = [ln["message"] for ln in got["lines"] if ln["about"] == "around"]
    assert any("RDMA completion error on QP" in m for m in around), around
    plain = json.loads(cli("follow", rid, "--db", str(db), "--json").stdout)
    assert not any("RDMA completion error" in ln["message"] for ln in plain["lines"])
