"""Which pair: the pairs table (forensics/analyses/pairs.py) and the pair as a factor."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import forensics
from forensics.analyses.pairs import UNKNOWN, Component, Pair, Pairs, _ranked
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli


def test_the_bad_pair_heads_the_table_and_is_a_factor(tmp_path: Path) -> None:
    """A planted bad decode host: its pair heads `report --json`'s pairs, the sentence
    says so with its interval, and `suspects` tests the pair."""
    inc = generate_planted("host", seed=0, requests=400)
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)
    rows = got["pairs"]
    assert (rows[0]["prefill_host"], rows[0]["decode_host"]) == ("prefill-0", "decode-1")
    assert [r["rate_low"] for r in rows] == sorted((r["rate_low"] for r in rows), reverse=True)
    assert sum(r["requests"] for r in rows) == got["onset"]["requests"]
    said = [s for s in got["conclusions"] if s.startswith("pairs:")]
    assert said and "prefill-0 → decode-1 ranks first" in said[0]
    sus = json.loads(cli("suspects", "--db", str(db), "--json").stdout)
    tested = sus["suspects"] + sus["screened_out"]
    assert any(p["feature"] == "host_pair" for p in tested)


def test_pairs_rank_by_the_lower_bound_and_say_only_what_their_numbers_do() -> None:
    """One of two corrupted does not top 60 of 300; a table of one known pair says
    nothing; the sentence's numbers are the top row's."""

    def pair(pre: str, dec: str, k: int, n: int) -> Pair:
        from forensics.analyses.stats import wilson

        lo, hi = wilson(k, n)
        return Pair(pre, dec, n, k, 0, 0, k / n, lo or 0.0, hi or 0.0)

    small, big = pair("p0", "d1", 1, 2), pair("p0", "d0", 60, 300)
    ranked = _ranked([small, big, pair(UNKNOWN, "d0", 1, 50)])
    assert ranked[0] is big and small.rate > big.rate and small.rate_low < big.rate_low
    said = Pairs(ranked, []).sentences()
    assert said == [f"pairs: p0 → d0 ranks first by the lower bound of its corruption rate: "
                    f"60/300 corrupted (20.0 %, Wilson 95 % interval "
                    f"{100 * big.rate_low:.1f}–{100 * big.rate_high:.1f} %), against "
                    f"{100 * 2 / 52:.1f} % on the other pairs"]  # fmt: skip
    assert Pairs([big, pair(UNKNOWN, "d1", 5, 9)], []).sentences() == []


def test_the_docs_say_every_key_of_a_pair() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "investigations.md").read_text()
    section = doc[doc.index("### `pairs`") :]
    for key in asdict(Pair("a", "b", 1, 0, 0, 0, 0.0, 0.0, 0.0)):
        assert f"`{key}`" in section, key
    assert "`nic_pair`" in section
    for key in asdict(Component("agent", "a", 1, 0, 0.0, 0.0, 0.0)):
        assert f"`{key}`" in section, key
    assert "`components`" in section
