"""Stock SGLang's evidence end to end: the stock demo incident (rendered by the real
journalctl where systemd-journal-remote is installed) lands in the declared tables,
the per-request view finds each planted cause in its request's window and nothing in
the others', `follow` and `report` tell it, and meta_info that is no literal is a note."""

from __future__ import annotations

from pathlib import Path

import pytest
from forensics.parsers.patterns import meta_info
from hypothesis import given, settings
from hypothesis import strategies as st

import forensics
from forensics.analyses.follow import follow
from forensics.analyses.report import report
from forensics.synthetic.demo import demo
from tests.helpers import cli


@pytest.fixture(scope="module")
def stock(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("stock")
    return demo(d / "incident", stock=True)


def _q(db: Path, sql: str) -> list[tuple]:
    return forensics.query_rows(sql, db)[1]


def test_stock_demo_has_no_probe_records_and_fills_the_stock_tables(stock) -> None:
    db = stock.ingest.db
    assert stock.real_journal  # .ci/run installs systemd-journal-remote
    for t in ("checksums", "canary", "steps"):
        assert _q(db, f"SELECT count(*) FROM {t}") == [(0,)]
    n = len(stock.truth["causes"])
    assert _q(db, "SELECT count(*) FROM req_stats") == [(2 * 48,)]  # each side, each request
    # each request's meta_info twice: decode's Finish line, and its metrics-file record
    assert _q(db, """SELECT pattern, host, count(*) FROM request_meta
                     WHERE finish_type IS NOT NULL GROUP BY ALL ORDER BY ALL""") == [
        ("finish_meta_info", "decode-0", 48), ("request_metrics_file", "decode-0", 48)]  # fmt: skip
    assert _q(
        db,
        """SELECT count(*) FROM request_meta f JOIN request_meta m USING (rid)
                     WHERE f.pattern = 'finish_meta_info' AND m.pattern = 'request_metrics_file'
                       AND f.finish_type = m.finish_type AND f.room = m.room
                       AND f.num_retractions = m.num_retractions
                       AND m.ts_us - f.ts_us BETWEEN 0 AND 1000000""",
    ) == [(48,)]
    assert _q(db, "SELECT count(*) FROM events WHERE kind = 'retract'")[0][0] == sum(
        c == "retract" for c in stock.truth["causes"].values()
    )
    assert n > 6


def test_each_planted_cause_is_in_its_request_window_and_nowhere_else(stock) -> None:
    cols, rows = forensics.query_rows(
        """SELECT rid, status, clock, prefill_host, decode_host, retractions, num_retractions,
                  other_aborts, own_transfer_failed, finish_type, cached_input_len,
                  decode_transfer_ms, running_req, bs_captured, errors, status_samples,
                  status_peers
           FROM request_evidence""",
        stock.ingest.db,
    )
    ev = {r[0]: dict(zip(cols, r, strict=True)) for r in rows}
    assert len(ev) == 48
    causes = stock.truth["causes"]
    first = forensics.query_rows(
        "SELECT rid FROM results ORDER BY start_us LIMIT 1", stock.ingest.db)[1][0][0]  # fmt: skip
    for rid, e in ev.items():
        sides = (e["clock"], e["prefill_host"], e["decode_host"])
        assert sides == ("decode", "prefill-0", "decode-0")
        assert e["cached_input_len"] is not None and e["decode_transfer_ms"] > 0
        assert e["bs_captured"] == (e["running_req"] in stock.truth["captured"])
        cause = causes.get(rid)
        assert (e["retractions"] > 0) == (cause == "retract"), rid
        assert (e["num_retractions"] == 1) == (cause == "retract"), rid
        assert (e["other_aborts"] > 0) == (cause == "other_abort"), rid
        assert e["own_transfer_failed"] == (cause == "own_timeout"), rid
        assert (e["finish_type"] == "abort") == (cause == "own_timeout"), rid
        assert e["errors"] == 0  # the CUDA error comes after every request
        # its own snapshot lists it beside the request before it (the first: alone)
        assert e["status_samples"] >= 1
        assert e["status_peers"] == (0 if rid == first else 1), rid
    assert {r for r, e in ev.items() if e["status"] == "corrupted"} == set(stock.truth["corrupted"])


def test_follow_a_room_across_hosts_in_time_order(stock) -> None:
    db = stock.ingest.db
    rid = stock.truth["http_error"][0]
    (room,) = _q(db, f"SELECT DISTINCT room FROM req_stats WHERE rid = '{rid}'")[0]
    for key in (rid, str(room)):
        f = follow(db, key)
        assert f.rids == [rid] and f.rooms == [room]
        assert {ln.host for ln in f.lines} == {"prefill-0", "decode-0"}
        times = [ln.ts_us for ln in f.lines]
        assert times == sorted(times)
        assert any("transfer failed" in ln.message for ln in f.lines)
        assert [h["status"] for h in f.harness] == ["http_error"]
    with pytest.raises(forensics.ForensicsError, match="no rid or room"):
        follow(db, "0123456789abcdef")


def test_report_tells_stock_evidence_and_claims_no_match(stock) -> None:
    rep = report(stock.ingest.db)
    text = "\n".join(rep.sentences())
    assert "KV transfer failures: decode-0 4 (4 in KVPoll.WaitingForInput)" in text
    assert "5 retractions (the KV pool ran full); 5 requests retracted, per meta_info" in text
    assert "aborts logged" in text
    assert "CUDA error: an illegal memory access" in text
    assert "no checksum records" in text
    assert "matched" not in text
    assert rep.as_dict()["stock"]["error_count"] == 1  # one entry: traceback and CUDA error
    # over time: each failure in its minute, by decode host and KVPoll state
    series = rep.as_dict()["stock"]["failures_by_minute"]
    assert sum(n for *_, n in series) == 4
    assert {(h, s) for _, h, s, _ in series} == {("decode-0", "WaitingForInput")}
    assert "transfer failures over time:" in text and "decode-0 KVPoll.WaitingForInput" in text


def test_coverage_names_the_flag_for_what_is_missing(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "decode-0.log"
    log.write_text(
        "[2026-09-20 14:03:12] Decode batch, #running-req: 3, #token: 10, token usage: 0.1, "
        "gen throughput (token/s): 1.0, #queue-req: 0\n"
    )
    forensics.ingest([str(log)], db)
    text = "\n".join(report(db).sentences())
    assert "--enable-request-time-stats-logging" in text
    assert "--log-requests" in text
    assert "no batch lines" not in text


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from([*"{}[]'\"\\:, ab01\n…", "'meta_info': {", "None", "1e9", "(", ")"]),
        max_size=40,
    ).map("".join)
)
def test_any_text_after_meta_info_is_a_row_or_a_note(tail: str) -> None:
    row = meta_info.row("Finish: obj=GenerateReqInput(rid='x'), out={'meta_info': {" + tail)
    assert set(row) == set(meta_info.COLUMNS)
    assert all(v is None or isinstance(v, str) for v in row.values())


def test_meta_info_span_is_read_only_as_a_literal() -> None:
    evil = "Finish: out={'meta_info': {'id': __import__('os').system('false')}}"
    assert "not a literal" in meta_info.row(evil)["extra"]
    nested = "Finish: out={'meta_info': {'id': 'a}b', 'x': {'y': \"q'}\"}, 'dp_rank': 2}} tail"
    r = meta_info.row(nested)
    assert (r["rid"], r["dp_rank"]) == ("a}b", "2")
    big = "Finish: out={'meta_info': {'id': '" + "x" * (meta_info.MAX_SPAN + 10) + "'}}"
    assert "over 64 KB" in meta_info.row(big)["extra"]


def _span_reference(line: str) -> str | None:
    """The brace walk one character at a time (what meta_info.span must equal)."""
    m = meta_info._START.search(line)
    if m is None:
        return None
    start, depth, quote, i = m.end() - 1, 0, None, m.end() - 1
    end = min(len(line), start + meta_info.MAX_SPAN)
    while i < end:
        ch = line[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return line[start : i + 1]
        i += 1
    return None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([*"{}'\"\\ax", "\\\\", "\\'", "'meta_info': {"]), max_size=30))
def test_span_jumps_between_significant_characters_as_the_plain_walk_reads(parts) -> None:
    line = "Finish: out={'meta_info': {" + "".join(parts)
    assert meta_info.span(line) == _span_reference(line)


def test_follow_states_the_status_and_adds_the_aborts_around(stock) -> None:
    db = stock.ingest.db
    victim = next(r for r, c in stock.truth["causes"].items() if c == "other_abort")
    f = follow(db, victim)
    assert f.headline().startswith(f"request {victim}: corrupted")
    assert all(ln.about == "request" for ln in f.lines)
    near = follow(db, victim, around=5.0)
    extra = [ln for ln in near.lines if ln.about == "around"]
    assert extra and all(ln.host in {x.host for x in f.lines} for ln in extra)
    assert any("abort" in ln.message.lower() for ln in extra)
    assert len(near.lines) == len(f.lines) + len(extra)
    r = cli("--db", str(db), "follow", victim, "--around", "5", text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].startswith(f"→ request {victim}: corrupted")
    assert "other events on these hosts within 5 s" in r.stdout
