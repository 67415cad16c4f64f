"""Conclusions (issue 4): correlate, compare, skew, canary, rooms, report — on planted truth.

Incidents come from the generator with a known corruption model, are written as journal
export streams plus harness results and ingested like any input; the statistics are
checked against scipy on tables counted from the planted truth, not from the database.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from scipy.stats import binomtest, fisher_exact
from scipy.stats.contingency import relative_risk

import forensics
from forensics.analyses.canary import canary, page_ranges
from forensics.analyses.compare import compare, requests_needed
from forensics.analyses.correlate import BAD_VERDICTS, correlate
from forensics.analyses.report import report
from forensics.analyses.rooms import rooms
from forensics.analyses.skew import skew
from forensics.analyses.stats import holm, two_by_two
from forensics.store.shards import folder
from forensics.synthetic import incident
from forensics.timefmt import iso_us

from .helpers import cli

REQUESTS = dict(sessions=25, rounds=8, steps_per_request=2)  # 200 requests a run


def _ingest(tmp: Path, db: Path, run: str, inc: incident.Incident, **tags: str) -> None:
    d = tmp / run
    d.mkdir()
    files = [
        incident.write_export(inc.prefill, d / "prefill.export"),
        incident.write_export(inc.decode, d / "decode.export"),
        incident.write_results(inc.results, d / "results.jsonl"),
    ]
    forensics.ingest([str(f) for f in files], db, run=run, tags=tags)


def _truth_table(inc: incident.Incident) -> tuple[int, int, int, int]:
    """Bad room × corrupted counted from what the generator planted; rooms with checksums
    on one side only have unknown exposure and are left out."""
    verdicts = inc.truth["verdicts"]
    known = [r for r in inc.results if verdicts[r["room"]] not in ("missing_dst", "missing_src")]
    bad = [verdicts[r["room"]] in BAD_VERDICTS for r in known]
    hit = [r["corrupted"] for r in known]
    a = sum(b and h for b, h in zip(bad, hit, strict=True))
    c = sum(not b and h for b, h in zip(bad, hit, strict=True))
    return a, sum(bad), c, len(bad) - sum(bad)


@pytest.fixture(scope="module")
def effect(tmp_path_factory: pytest.TempPathFactory):
    """Bad rooms cause most corruption; the rest is a 5 % background."""
    tmp = tmp_path_factory.mktemp("effect")
    inc = incident.generate(**REQUESTS, seed=1, corruption="effect", base_rate=0.05, bad_share=0.2)
    _ingest(tmp, tmp / "db.duckdb", "effect", inc)
    return tmp / "db.duckdb", inc


@pytest.fixture(scope="module")
def independent(tmp_path_factory: pytest.TempPathFactory):
    """Corruption at 20 %, whatever the rooms and steps say."""
    tmp = tmp_path_factory.mktemp("independent")
    inc = incident.generate(
        **REQUESTS, seed=2, corruption="independent", base_rate=0.2, bad_share=0.2
    )
    _ingest(tmp, tmp / "db.duckdb", "independent", inc)
    return tmp / "db.duckdb", inc


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory):
    """flag-off and flag-on differ only by noise (both 20 %); fixed really is lower (3 %)."""
    tmp = tmp_path_factory.mktemp("runs")
    db = tmp / "db.duckdb"
    runs = {}
    for run, seed, rate in (("flag-off", 11, 0.2), ("flag-on", 12, 0.2), ("fixed", 13, 0.03)):
        inc = incident.generate(**REQUESTS, seed=seed, corruption="independent", base_rate=rate)
        _ingest(tmp, db, run, inc, flag=run)
        runs[run] = inc
    return db, runs


def test_correlate_finds_the_real_effect_with_scipys_numbers(effect) -> None:
    db, inc = effect
    res = correlate(db)
    room = res.associations[0]
    a, n1, c, n0 = _truth_table(inc)
    t = room.table
    assert (t.exposed_cases, t.exposed_total, t.control_cases, t.control_total) == (a, n1, c, n0)
    assert t.p_value == pytest.approx(fisher_exact([[a, n1 - a], [c, n0 - c]]).pvalue, rel=1e-9)
    rr = relative_risk(a, n1, c, n0)
    ci = rr.confidence_interval(0.95)
    assert (t.relative_risk, t.rr_low, t.rr_high) == pytest.approx(
        (rr.relative_risk, ci.low, ci.high)
    )
    assert t.significant and t.relative_risk > 3
    assert room.conclusion.startswith("corruption is associated with a bad room")
    assert f"{a} of {a + c} corrupted requests had it" in room.conclusion
    assert res.requests == 200 and res.corrupted == len(inc.truth["corrupted"])


@pytest.mark.parametrize("fixture", ["effect", "independent"])
def test_correlate_gives_the_numbers_of_suspects_probe_rows(fixture, request) -> None:
    """`correlate` stays a command of its own; its two tables are the two probe rows of
    `suspects` (a bad room, a step with unexpected page writes), number for number."""
    from forensics.analyses.suspects import suspects

    db, _ = request.getfixturevalue(fixture)
    rows = {s.feature: s for s in suspects(db, min_support=1).suspects}
    for assoc, feature in zip(correlate(db).associations, ("verdict", "unexpected_steps"),
                              strict=True):  # fmt: skip
        if feature not in rows:  # screened out: its margins could not give a small p
            continue
        mine, theirs = assoc.table, rows[feature].table
        for key in ("exposed_cases", "exposed_total", "control_cases", "control_total",
                    "p_value", "relative_risk", "rr_low", "rr_high", "odds_ratio", "or_low",
                    "or_high"):  # fmt: skip
            assert getattr(mine, key) == getattr(theirs, key), (feature, key)
    assert "verdict" in rows  # the bad-room row is tested in both incidents


def test_correlate_says_no_evidence_when_corruption_is_independent(independent) -> None:
    db, inc = independent
    res = correlate(db)
    room, step = res.associations
    a, n1, c, n0 = _truth_table(inc)
    assert (room.table.exposed_cases, room.table.exposed_total) == (a, n1)
    assert room.table.p_value == pytest.approx(fisher_exact([[a, n1 - a], [c, n0 - c]]).pvalue)
    assert not room.table.significant
    assert room.conclusion.startswith("no evidence that corruption is associated with a bad room")
    assert not step.table.significant


def test_correlate_bad_steps_table_counts_the_burst(effect) -> None:
    db, _ = effect
    step = correlate(db).associations[1]
    # The burst puts two requests into steps with unexpected writes; every request has steps.
    assert step.table.exposed_total == 2 and step.excluded == 0
    assert step.table.exposed_total + step.table.control_total == 200


def test_compare_tells_noise_from_a_real_difference(three_runs) -> None:
    db, runs = three_runs
    res = compare(db)
    rates = {r.run: r for r in res.rates}
    for run, inc in runs.items():
        k = len(inc.truth["corrupted"])
        ci = binomtest(k, 200).proportion_ci(0.95, method="wilson")
        assert (rates[run].corrupted, rates[run].requests) == (k, 200)
        assert (rates[run].low, rates[run].high) == pytest.approx((ci.low, ci.high))
        assert rates[run].tags == {"flag": run}
    pairs = {(p.a, p.b): p for p in res.pairs}
    raw = []
    for (a, b), p in pairs.items():
        ka, kb = rates[a].corrupted, rates[b].corrupted
        expect = fisher_exact([[ka, 200 - ka], [kb, 200 - kb]]).pvalue
        assert p.table.p_value == pytest.approx(expect)
        raw.append(expect)
    assert [p.p_adjusted for p in pairs.values()] == pytest.approx(holm(raw))
    noise = pairs[("flag-off", "flag-on")]
    assert not noise.significant and "within noise" in noise.conclusion
    assert noise.needed is not None and noise.needed > 200
    for other in (("flag-off", "fixed"), ("flag-on", "fixed")):
        assert pairs[other].significant and "a real difference" in pairs[other].conclusion


def test_compare_two_named_runs_and_an_unknown_one(three_runs) -> None:
    db, _ = three_runs
    res = compare(db, ["flag-on", "fixed"])
    assert [r.run for r in res.rates] == ["flag-on", "fixed"] and len(res.pairs) == 1
    assert res.pairs[0].p_adjusted == res.pairs[0].table.p_value  # one pair: nothing to adjust
    proc = cli("compare", "flag-on", "nope", "--db", str(db))
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == (
        "error: no run named 'nope'; known: flag-off, flag-on, fixed"
    )


@pytest.mark.parametrize("offset_us", [2_500, -40_000])
def test_skew_bounds_contain_the_planted_offset(tmp_path: Path, offset_us: int) -> None:
    inc = incident.generate(decode_offset_us=offset_us)
    db = tmp_path / "db.duckdb"
    _ingest(tmp_path, db, "r", inc)
    (pair,) = skew(db).pairs
    assert (pair.src_host, pair.dst_host) == ("prefill-0", "decode-0")
    assert pair.lower_us < offset_us < pair.upper_us
    # Tight enough to use: the shortest transfer and the receive-to-send gap bound it.
    assert pair.upper_us - pair.lower_us < 20_000
    rooms_with_both = sum(
        1 for v in inc.truth["verdicts"].values() if v not in ("missing_dst", "missing_src")
    )
    assert pair.upper_rooms == rooms_with_both
    assert pair.consistent
    behind = "behind" in pair.sentence.split(" and ")[0]
    assert behind == (pair.upper_us < 0)


def test_skew_on_whole_second_times_is_widened_not_contradicted(tmp_path: Path) -> None:
    # SGLang's prefix without SGLANG_LOG_MS=1: receive, send and arrival all in one second
    # read as equal times, which once gave "+0.0 and +0.0 ms … the bounds contradict"
    rid, room = "9b1f0c2e4d5a47f7a1e3c0d2b4f6a8c1", 7301934425522180813
    recv = (f"Receive: obj=GenerateReqInput(rid='{rid}', bootstrap_host='10.0.4.11', "
            f"bootstrap_port=8998, bootstrap_room={room}, stream=False)")  # fmt: skip
    ck = f"rid={rid} buf=kv layer=all tp=0 nbytes=8 head=a tail=b full=c"
    (tmp_path / "prefill-0.log").write_text(
        f"[2026-11-29 07:00:01 TP0] forensics:checksum side=src room={room} {ck}\n")  # fmt: skip
    (tmp_path / "decode-0.log").write_text(
        f"[2026-11-29 07:00:01 TP0] {recv}\n"
        f"[2026-11-29 07:00:01 TP0] forensics:checksum side=dst room={room} {ck}\n")  # fmt: skip
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(tmp_path / "prefill-0.log"), str(tmp_path / "decode-0.log")], db)
    (pair,) = skew(db).pairs
    assert (pair.lower_us, pair.upper_us, pair.resolution_us) == (-1_000_000, 1_000_000, 1_000_000)
    assert pair.consistent and "contradict" not in pair.sentence
    assert "whole seconds" in pair.sentence and "widened by 1 s" in pair.sentence


def test_canary_lists_the_planted_burst_exactly(effect) -> None:
    db, inc = effect
    res = canary(db, top=10)
    burst = inc.truth["burst_steps"]
    assert [s.step for s in sorted(res.steps, key=lambda s: s.step)] == burst
    assert res.steps_with_writes == len(burst)
    for s in res.steps:
        assert [lw.layer for lw in s.layers] == [30]
        (lw,) = s.layers
        assert lw.pages == list(range(300 + s.step % 7, 330 + s.step % 7))
        assert (lw.n_expected, lw.n_changed, lw.n_unexpected) == (2, 32, 30)
        assert len(s.rids) == 1 and s.rids[0] in {r["rid"] for r in inc.results}
    assert len(canary(db, top=1).steps) == 1


def test_rooms_counts_and_worst_first(effect) -> None:
    db, inc = effect
    res = rooms(db, limit=500)
    planted: dict[str, int] = {}
    for v in inc.truth["verdicts"].values():
        planted[v] = planted.get(v, 0) + 1
    assert list(res.counts) == ["effect"]
    assert res.counts["effect"] == {v: planted[v] for v in res.counts["effect"]}
    assert sum(res.counts["effect"].values()) == len(inc.truth["verdicts"])
    order = [r["verdict"] for r in res.worst]
    assert order[0] == "conflict" and "match" not in order
    stale = rooms(db, verdict="stale").worst
    assert {r["room"] for r in stale} == {
        k for k, v in inc.truth["verdicts"].items() if v == "stale"
    }
    assert all(r["stale_of"] == inc.truth["stale_of"][r["room"]] for r in stale)


def test_report_tells_the_story_of_the_demo(tmp_path: Path) -> None:
    res = forensics.demo(tmp_path / "inc")
    rep = report(res.ingest.db)
    text = rep.sentences()
    # the headline first (the strongest finding), then coverage
    head = rep.headline()
    assert text[: len(head)] == head and head[0].startswith("a bad room (mismatch, stale")
    assert rep.verdict.kind == "integrity" and head[0] == rep.verdict.statement
    inputs = text[len(head)]
    assert inputs.startswith("inputs: ") and "2 hosts (decode-0, prefill-0)" in inputs
    (gap,) = rep.coverage.gaps
    assert (gap.host, gap.suppressed, gap.unit) == ("decode-0", 1834, "sglang-decode.service")
    assert any(s.startswith("journald suppressed 1,834 messages") for s in text)
    per_host = next(s for s in text if s.startswith("per host: "))
    for h in rep.coverage.hosts:
        assert (
            f"{h.host} {h.entries:,} entries, {iso_us(h.first_ts_us)} → {iso_us(h.last_ts_us)}"
            in per_host
        )
    assert "no input line was quarantined" in text
    assert rep.coverage.quarantined == 0 and rep.coverage.results == 8 * 4  # sessions × rounds
    assert any("corruption is associated with a bad room" in s for s in text)
    assert any(s.startswith("3 decode steps wrote pages outside") for s in text)
    assert any("decode-0's clock is" in s for s in text)
    doc = rep.as_dict()
    assert doc["conclusions"] == text
    orjson.dumps(doc, default=str)  # JSON-able as the CLI prints it


def test_cli_json_for_every_analysis_command(effect) -> None:
    db, inc = effect
    docs = {}
    for cmd in ("rooms", "correlate", "compare", "skew", "canary", "report"):
        proc = cli(cmd, "--db", str(db), "--json")
        assert proc.returncode == 0, proc.stderr.decode()
        docs[cmd] = orjson.loads(proc.stdout)
    assert docs["correlate"]["associations"][0]["significant"] is True
    assert docs["compare"]["rates"][0]["corrupted"] == len(inc.truth["corrupted"])
    assert docs["canary"]["steps_with_unexpected_writes"] == len(inc.truth["burst_steps"])
    assert docs["skew"]["pairs"][0]["lower_us"] < 2_500 < docs["skew"]["pairs"][0]["upper_us"]
    assert docs["report"]["correlation"] == docs["correlate"]
    text = cli("correlate", "--db", str(db)).stdout.decode()
    assert "corruption is associated with a bad room" in text and "Fisher" in text


def test_cli_run_filter_and_errors(effect) -> None:
    db, _ = effect
    proc = cli("rooms", "--db", str(db), "--run", "nope")
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == "error: no run named 'nope'; known: effect"
    proc = cli("rooms", "--db", str(db), "--verdict", "broken")
    assert proc.returncode == 2 and "unknown verdict 'broken'" in proc.stderr.decode()
    assert cli("skew", "--db", str(db), "--run", "effect").returncode == 0


def test_demo_ends_with_the_report(tmp_path: Path) -> None:
    proc = cli("demo", "--dir", str(tmp_path / "inc"))
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    tail = out[out.rindex("for the bug report") :]
    assert "corruption is associated with a bad room" in tail
    assert "decode steps wrote pages outside their expected set" in tail


def test_statistics_helpers() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    empty = two_by_two(0, 0, 3, 10)
    assert empty.p_value is None and not empty.significant
    inf = two_by_two(5, 10, 0, 30)
    assert inf.as_dict()["relative_risk"] is None  # JSON has no ∞
    assert requests_needed(0.2, 0.2) is None
    assert requests_needed(0.22, 0.17) > requests_needed(0.3, 0.1)
    assert page_ranges([5, 1, 2, 3, 9]) == "1-3, 5, 9"
    assert page_ranges(list(range(0, 40, 2)), limit=3) == "0, 2, 4, … (20 pages)"
    assert page_ranges(None) == "not listed"


def test_readers_use_this_versions_views_on_an_older_file(effect, tmp_path: Path) -> None:
    db, _ = effect
    old = tmp_path / "copy" / db.name  # the incident folder, copied
    old.parent.mkdir()
    old.write_bytes(db.read_bytes())
    shutil.copytree(folder(db), folder(old))
    con = forensics.connect(old)
    con.execute("DROP VIEW canary_writes")  # as written by a release without it
    con.close()
    assert canary(old).steps_with_writes == canary(db).steps_with_writes
    con = forensics.connect_read_only(old)
    try:  # the file itself is untouched: the view lives on the connection only
        assert con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = "
                           "'canary_writes' AND NOT temporary").fetchall() == [(0,)]  # fmt: skip
    finally:
        con.close()


def test_text_output_states_each_answer(three_runs, effect) -> None:
    db, _ = three_runs
    text = " ".join(cli("compare", "--db", str(db)).stdout.decode().split())
    assert "flag-off" in text and "flag=fixed" in text
    assert "within noise" in text and "a real difference" in text
    db, inc = effect
    text = " ".join(cli("canary", "--db", str(db)).stdout.decode().split())
    for step in inc.truth["burst_steps"]:
        assert re.search(rf"decode-0 │ {step} │ \S+ \S+ │ 30 │ 2 │ 32 │ 30 │", text), step
    assert "decode steps wrote pages outside their expected set" in text
    assert "clock is at most" in cli("skew", "--db", str(db)).stdout.decode()
    text = cli("rooms", "--db", str(db), "--verdict", "partial").stdout.decode()
    assert "partial" in text and "conflict" in text.split("worst rooms")[0]


def test_every_command_answers_on_a_journal_without_evidence(tmp_path: Path) -> None:
    log = tmp_path / "plain.log"
    log.write_text("2026-11-29T07:00:00.000001+0000 h1 app[1]: hello\n")
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(log)], db)
    rep = report(db)
    assert rep.sentences()[0].startswith("no harness results: no request is judged")
    assert rep.verdict.kind == "none" and rep.verdict.next["baseline"].startswith("forensics repro")
    inputs = rep.sentences()[len(rep.headline())]
    assert inputs.startswith("inputs: 1 journal entry from 1 host (h1)")
    assert inputs.endswith("; 0 harness results; 1 source")  # not "1 sources"
    assert rep.correlation.associations[0].conclusion == (
        "cannot test a bad room (mismatch, stale, partial): no harness request has the "
        "evidence to tell"
    )
    assert rep.comparison.rates == [] and rep.comparison.without_results == ["default"]
    for cmd in ("rooms", "correlate", "compare", "skew", "canary", "report"):
        proc = cli(cmd, "--db", str(db))
        assert proc.returncode == 0 and proc.stderr == b"", (cmd, proc.stderr)
        assert "→" in proc.stdout.decode() or "- " in proc.stdout.decode()
    # the trace (both formats) and the bundle of an incident with nothing to draw
    for out, fmt in (("t.pftrace", "proto"), ("t.json", "json")):
        proc = cli("trace", "--db", str(db), "--out", str(tmp_path / out), "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert b"1 hosts, 0 slices" in proc.stdout  # the host is a process of its own
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    packets = pb.Trace.FromString((tmp_path / "t.pftrace").read_bytes()).packet
    assert [p.track_descriptor.process.process_name for p in packets
            if p.HasField("track_descriptor")] == ["h1"]  # fmt: skip
    proc = cli("bundle", "--db", str(db), "--out", str(tmp_path / "b.tar.zst"))
    assert proc.returncode == 0 and (tmp_path / "b.tar.zst").stat().st_size > 0, proc.stderr


def test_correlate_with_a_chosen_set_of_bad_verdicts(effect) -> None:
    db, inc = effect
    chosen = ("partial", "mismatch", "stale", "conflict")
    res = correlate(db, bad=chosen)
    verdicts = inc.truth["verdicts"]
    exposed = [verdicts[r["room"]] in chosen for r in inc.results]
    assert res.associations[0].table.exposed_total == sum(exposed)
    assert res.associations[0].label == "a bad room (partial, mismatch, stale, conflict)"
    doc = orjson.loads(
        cli("correlate", "--db", str(db), "--bad", ",".join(chosen), "--json").stdout
    )
    assert doc["associations"][0]["exposed_total"] == sum(exposed)
    proc = cli("correlate", "--db", str(db), "--bad", "match")
    assert proc.returncode == 2 and proc.stderr.decode().startswith(
        "error: not a bad verdict: match"
    )


def test_every_answer_takes_a_path_or_a_connection(effect) -> None:
    """One face for the store: a path opens (and closes) its own read-only connection; a
    connection given is used as it is and left open for its owner."""
    db, _ = effect
    con = forensics.connect_read_only(db)
    try:
        for answer in (forensics.rooms, forensics.correlate, forensics.compare,
                       forensics.skew, forensics.canary, forensics.report,
                       forensics.suspects):  # fmt: skip
            assert answer(con).as_dict() == answer(db).as_dict(), answer.__name__
        assert con.execute("SELECT 1").fetchall() == [(1,)]  # still open
    finally:
        con.close()


def test_rooms_and_dashboard_follow_results_to_the_run_of_their_evidence(tmp_path: Path) -> None:
    """The README's repro recipe: the logs ingested as one run, the results as another."""
    d = tmp_path / "demo"
    forensics.demo(d)
    db = tmp_path / "split.duckdb"
    forensics.ingest([str(d / "prefill-0.export"), str(d / "decode-0.log")], db, run="logs")
    # as forensics repro writes them: it never knows the room
    rows = [orjson.loads(ln) for ln in (d / "results.jsonl").read_bytes().splitlines()]
    (tmp_path / "r.jsonl").write_bytes(b"".join(
        orjson.dumps({k: v for k, v in r.items() if k != "room"}) + b"\n" for r in rows))  # fmt: skip
    forensics.ingest([str(tmp_path / "r.jsonl")], db, run="harness")
    res = forensics.rooms(db, "harness")
    assert list(res.counts) == ["logs"] and res.worst
    assert res.followed == ["run harness's results have their evidence in run logs: it is included"]
    from forensics.dashboards.write import dashboard

    board = dashboard(db, ["harness"], tmp_path / "d.html")
    assert board.notes[0] == res.followed[0]
    assert "writes" in board.panels and "verdicts" in board.panels


def test_since_and_until_restrict_every_analysis_to_the_window(tmp_path: Path) -> None:
    from forensics.timefmt import iso_us

    from .helpers import cli

    forensics.demo(tmp_path / "d")
    db = str(tmp_path / "d" / "forensics.duckdb")
    (lo, hi, mid), = forensics.query_rows(
        "SELECT least(min(start_us), (SELECT min(ts_us) FROM entries)), greatest(max(start_us),"
        " (SELECT max(ts_us) FROM entries)), quantile_disc(start_us, 0.5) FROM results", db)[1]  # fmt: skip

    def run(*args: str) -> dict:
        proc = cli(*args, "--db", db, "--json")
        assert proc.returncode == 0, proc.stderr
        return orjson.loads(proc.stdout)

    whole = run("correlate")
    assert run("correlate", "--since", str(lo / 1e6), "--until", str((hi + 1) / 1e6)) == whole
    first = run("correlate", "--until", iso_us(mid).removesuffix("Z"))
    (n_first,), = forensics.query_rows(
        f"SELECT count(*) FROM results WHERE start_us < {mid // 1000 * 1000}", db)[1]  # fmt: skip
    judged = first["requests"] + first["failed"] if "failed" in first else first["requests"]
    assert 0 < judged <= n_first < whole["requests"]
    later = run("rooms", "--since", str((hi + 10_000_000) / 1e6))
    assert later["counts"] == {}  # nothing happened after the last request
    bad = cli("rooms", "--db", db, "--since", "yesterday")
    assert bad.returncode == 2 and b"--since 'yesterday': not a time" in bad.stderr
    bad = cli("rooms", "--db", db, "--since", "2026-11-29T08:00:00", "--until", "2026-11-29")
    assert bad.returncode == 2 and b"--until must be after --since" in bad.stderr


def test_follow_a_mismatched_room_says_its_verdict_and_folds_the_steps(tmp_path: Path) -> None:
    from forensics.analyses.follow import follow

    res = forensics.demo(tmp_path / "inc")
    db = res.ingest.db
    rows = forensics.query_rows("SELECT room FROM rooms WHERE verdict = 'mismatch' LIMIT 1", db)
    room = str(rows[1][0][0])
    f = follow(db, room)
    assert f.headline().startswith(f"room {room}: mismatch")
    every = follow(db, room, all_lines=True)
    steps = [ln for ln in every.lines if ln.message.startswith("forensics:step")]
    folded = [ln for ln in f.lines if ln.about == "steps"]
    assert len(steps) > 3 and folded
    assert all(" × " in ln.message and "steps " in ln.message for ln in folded)
    # every step record is in exactly one place: left as it is, or counted in a range
    left = [
        ln for ln in f.lines if ln.about == "request" and ln.message.startswith("forensics:step")
    ]
    assert f.folded + len(left) == len(steps)
    assert len(f.lines) == len(every.lines) - f.folded + len(folded)


def test_counts_read_as_words() -> None:
    from forensics.plural import counted

    assert counted(1, "line") == "1 line"
    assert counted(1_500, "line") == "1,500 lines"
    assert counted(0, "entry", "entries") == "0 entries"


def test_step_records_fold_on_prefixed_logs_too() -> None:
    """A plain log's step records carry SGLang's prefix: they fold like the journal's
    (issue 52: 56 lines for one request, 403 for one room on prefixed logs)."""
    from forensics.analyses.follow import FollowLine, _fold

    lines = [FollowLine(i, i, "decode-0", "r", 1, i,
                        f"[2026-09-20 14:03:12 DP0 TP1] forensics:step step={100 + i} bs=4",
                        "request") for i in range(40)]  # fmt: skip
    out, folded = _fold(lines)
    assert folded == 40 and len(out) == 1 and "steps 100–139" in out[0].message
