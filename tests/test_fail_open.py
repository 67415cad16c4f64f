"""Did users still get 200s: the fail_open view, its report section and its factor, on a
planted peer loss (every transfer on decode-1 failing, some retried elsewhere)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

import forensics
from forensics.analyses.failopen import FailOpen
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli


@pytest.fixture(scope="module")
def lost(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    d = tmp_path_factory.mktemp("lost")
    inc = generate_planted(None, seed=0, requests=400, peer_loss=0.5)
    results = {r["rid"]: r for r in inc.results}
    files = write_planted(inc, d)
    db = d / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    return db, {"truth": inc.truth, "results": results}


def test_answered_failures_are_counted_and_retries_are_not(lost: tuple[Path, dict]) -> None:
    db, inc = lost
    answered = {rid for rid, r in inc["results"].items() if r["status"] in ("ok", "corrupted")}
    want_open = set(inc["truth"]["fail_open"]) & answered
    want_back = set(inc["truth"]["recovered"]) & answered
    assert want_open and want_back
    _, rows = forensics.query_rows("SELECT rid, recovered FROM fail_open", db)
    assert {r for r, back in rows if not back} == want_open
    assert {r for r, back in rows if back} == want_back
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)["fail_open"]
    corrupted = sum(inc["results"][r]["corrupted"] for r in want_open)
    assert (got["fail_open"], got["corrupted"], got["recovered"]) == (
        len(want_open), corrupted, len(want_back))  # fmt: skip
    assert got["pairs"][0] == {"prefill_host": "prefill-0", "decode_host": "decode-1",
                               "requests": len(want_open)}  # fmt: skip


def test_a_failed_transfer_answered_all_the_same_is_a_suspect(lost: tuple[Path, dict]) -> None:
    db, _ = lost
    sus = json.loads(cli("suspects", "--db", str(db), "--json").stdout)
    top = sus["suspects"][0]
    assert top["feature"] in ("answered_failed", "own_transfer_failed", "decode_host")
    mine = next(p for p in sus["suspects"] if p["feature"] == "answered_failed")
    assert mine["verdict"] == "suspect"


def test_the_sentences_say_their_numbers() -> None:
    assert FailOpen(0, 0, 0, 0, 0).sentences() == []
    said = FailOpen(5, 3, 4, 1, 2, [{"prefill_host": "p", "decode_host": "d",
                                     "requests": 5}]).sentences()  # fmt: skip
    assert said == ["fail-open: 5 requests were answered (status ok or corrupted) although "
                    "their transfer failed (4) or their bytes mismatched (1); 3 of them "
                    "corrupted; most through p → d (5)",
                    "2 requests whose transfer failed were retried under another room and "
                    "recovered (not fail-open)"]  # fmt: skip
    assert FailOpen(0, 0, 0, 0, 3).sentences()[0].startswith("3 requests whose transfer")


def test_the_docs_say_every_key() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "investigations.md").read_text()
    section = doc[doc.index("### `fail_open`") :]
    for key in asdict(FailOpen(0, 0, 0, 0, 0)):
        assert f"`{key}`" in section, key
