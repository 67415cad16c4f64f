"""The report's first sentence, whatever else it says: with no suspect it leads with
"insufficient evidence", in the report and in the dashboard's banner."""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.analyses.report import report
from forensics.synthetic.planted import generate_planted, write_planted


def test_no_suspect_leads_with_insufficient_evidence(tmp_path: Path) -> None:
    inc = generate_planted(None, seed=1, requests=300)
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    rep = report(db)
    assert not rep.suspects.found() and rep.first_failure is None and not rep.onset.found
    assert rep.headline()[0].startswith("suspects: insufficient evidence")
    assert rep.sentences()[0] == rep.headline()[0]
    page = forensics.dashboard(db, out=tmp_path / "d.html").path.read_text()
    first = page.index('<p class="conclusion">')  # the banner: the headline's lines
    assert page[first:].startswith('<p class="conclusion">suspects: insufficient evidence')
