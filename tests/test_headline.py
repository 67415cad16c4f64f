"""The report's first sentence, whatever else it says: with no suspect the verdict is
none, in the report and in the dashboard's banner, and the suspects say why."""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.analyses.report import report
from forensics.synthetic.planted import generate_planted, write_planted


def test_no_suspect_leads_with_the_verdict_none(tmp_path: Path) -> None:
    inc = generate_planted(None, seed=1, requests=300)
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    rep = report(db)
    assert not rep.suspects.found() and rep.first_failure is None and not rep.onset.found
    assert rep.verdict.kind == "none" and rep.headline()[0].startswith("no cause stands out")
    assert rep.sentences()[0] == rep.headline()[0]
    assert any(s.startswith("suspects: insufficient evidence") for s in rep.sentences())
    page = forensics.dashboard(db, out=tmp_path / "d.html").path.read_text()
    first = page.index('<p class="verdict">')  # the banner: the verdict, then its evidence
    assert page[first:].startswith('<p class="verdict">verdict (none): no cause stands out')
