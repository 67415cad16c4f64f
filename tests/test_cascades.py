"""Who failed first: the echo rules (forensics/analyses/echoes.toml), cascades and the
first failure (forensics/analyses/cascades.py), swept over generated failure tables and
end to end on a planted peer loss."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import forensics
from forensics.analyses import cascades as C
from forensics.analyses.onset import load_strata
from forensics.scope import scoped
from forensics.synthetic.planted import generate_planted, write_planted
from forensics.synthetic.requests import generate_failures
from tests.helpers import cli


def _first(
    kind: str, seed: int, lost: tuple[float, float] = (1 / 3, 2 / 3)
) -> tuple[int | None, int | None]:
    f = generate_failures(kind, seed, lost=lost)
    rid = [f"r{i:05d}" for i in range(len(f.hosts))]
    req = C.Requests(f.requests.t, load_strata(f.requests.concurrency),
                     np.asarray(rid, dtype=object), lambda: dict(zip(rid, f.hosts, strict=True)))  # fmt: skip
    found = C.cascades(f.rows, req)
    first = min(found, key=lambda c: f.rows[c.root]["ts_us"]) if found else None
    return (None if first is None else first.root), f.root


@pytest.mark.slow
def test_the_planted_first_failure_is_found_and_background_claims_none() -> None:
    """Seeds 0–19: a lost agent's disconnect, a third to two thirds of the requests in, is
    the first failure on at least 19, and so it is when it comes 20–40 % in (less than a
    quarter after it is left: judged across hosts and against the time before); failures
    at a load-driven background rate (half naming a session, each echoed by prefill) make
    no cascade on at least 18."""
    planted = sum(got == root for got, root in (_first("cascade", s) for s in range(20)))
    early = sum(got == root for got, root in (_first("cascade", s, (0.2, 0.4)) for s in range(20)))
    quiet = sum(got is None for got, _ in (_first("background", s) for s in range(20)))
    assert planted >= 19 and early >= 19 and quiet >= 18, (planted, early, quiet)


def test_every_rules_sample_is_a_failure_it_reads_as_an_echo(tmp_path: Path) -> None:
    """Each echo rule's real sample line, ingested, is a row of `failures` that the
    rule's `echo` describes (its origin beside it)."""
    rules = C.rules()
    assert len({r.name for r in rules}) == len(rules) and all(r.origin for r in rules)
    log = tmp_path / "echoes.log"
    log.write_text("".join(r.sample + "\n" for r in rules))
    db = tmp_path / "e.duckdb"
    forensics.ingest([str(log)], db, host="h0", fmt="sglang")
    cols, rows = forensics.query_rows(
        f"SELECT entry_no, {', '.join(C.COLUMNS)} FROM failures ORDER BY entry_no", db)  # fmt: skip
    by_entry: dict[int, list[dict]] = {}  # a line may be two failures (a watchdog's)
    for r in rows:
        by_entry.setdefault(r[0], []).append(dict(zip(cols[1:], r[1:], strict=True)))
    for i, rule in enumerate(rules):
        assert i in by_entry, rule.name
        mine = [row for row in by_entry[i] if C.matches(rule.echo, row)
                and (not rule.waited or row["began_us"] is not None)]  # fmt: skip
        assert mine, (rule.name, by_entry[i])
        if rule.waited:  # a timeout's sample: its wait's start read from the duration it states
            assert all(row["ts_us"] - row["began_us"] >= 300e6 for row in mine)


def test_a_timeout_echoes_a_failure_that_came_after_its_wait_began() -> None:
    """Decode waited on room 7 for 300 s; prefill's disconnect 100 s into the wait is what
    it waited on: the timeout is its echo. A timeout whose wait began after a failure, or
    one that states no wait, is none."""
    rows = [
        _row(0.0, "prefill-0", 0, 9, code="NIXL_ERR_REMOTE_DISCONNECT"),  # before any wait
        _row(200.0, "prefill-0", 0, 7, code="NIXL_ERR_REMOTE_DISCONNECT"),
        _row(400.0, "decode-0", 0, 7, reason="Request 7 timed out after 300.0s in "
             "KVPoll.WaitingForInput", waited=300.0),  # began at 100 s: before the cause
        _row(450.0, "decode-2", 0, 9, reason="Request 9 timed out after 300.0s in "
             "KVPoll.WaitingForInput", waited=300.0),  # began at 150 s: after room 9's failure
        _row(460.0, "decode-3", 1, 8, reason="timed out, no duration"),  # no wait known
    ]  # fmt: skip
    assert C.explained_by(rows) == [None, None, 1, None, None]
    # on the same host, any room: a collective stuck behind an earlier failure there
    host = [
        _row(10.0, "decode-1", 0, 1, code="NIXL_ERR_REMOTE_DISCONNECT"),
        {**_row(600.0, "decode-1", 3, None, waited=600.0), "kind": "collective"},
    ]
    assert C.explained_by(host) == [None, 0]


def _row(
    ts: float,
    host: str,
    tp: int,
    room: int | None,
    code=None,
    reason=None,
    peer=None,
    waited: float | None = None,
):
    return {"ts_us": int(ts * 1e6), "host": host, "tp": tp, "kind": "transfer", "rid": None,
            "room": room, "peer": peer, "code": code, "reason": reason,
            "began_us": None if waited is None else int((ts - waited) * 1e6)}  # fmt: skip


def test_echoes_point_back_by_their_rules_and_nothing_else() -> None:
    rows = [
        _row(0.0, "decode-1", 0, 1, code="NIXL_ERR_REMOTE_DISCONNECT"),
        _row(0.1, "decode-1", 1, 1, reason="Failed due to an unknown reason from another rank"),
        _row(0.5, "prefill-0", 0, 1, reason="Aborted by AbortReq."),
        _row(30.0, "decode-1", 0, 2, code="NIXL_ERR_NOT_FOUND"),
        _row(31.0, "decode-0", 0, 3, code="NIXL_ERR_NOT_FOUND"),  # another host: unexplained
        _row(32.0, "prefill-0", 0, 9, reason="Aborted by AbortReq."),  # no earlier room 9
        _row(40.0, "decode-1", 0, 4, code="NIXL_ERR_NOT_FOUND"),
        _row(41.0, "decode-1", 0, 5, code="NIXL_ERR_NOT_FOUND"),
    ]
    assert C.explained_by(rows) == [None, 0, 1, 0, None, None, 0, 0]  # not-found: the disconnect
    # the root's echoes reach rooms 2, 4 and 5 beside its own: a cascade, by time alone
    found = C.cascades(rows + [_row(t, "decode-0", 0, 100 + t) for t in range(100, 1000, 100)])
    assert [c.root for c in found] == [0] and found[0].echoes == [1, 2, 3, 6, 7]


def test_a_planted_peer_loss_is_the_first_failure_and_heads_the_report(tmp_path: Path) -> None:
    inc = generate_planted(None, seed=0, requests=400, peer_loss=0.5)
    files = write_planted(inc, tmp_path / "i")
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)
    first = got["first_failure"]
    assert first is not None and set(first) == {f.name for f in fields(C.FirstFailure)}
    assert (first["host"], first["code"], first["ts_us"]) == (
        "decode-1", "NIXL_ERR_REMOTE_DISCONNECT", inc.truth["peer_loss_us"])  # fmt: skip
    assert first["hosts"] == ["decode-1", "prefill-0"] and first["echoes"] >= 3
    # no probes: the stock lines' causal pairs bound the clocks, one side only
    assert "decode's Receive of a room before prefill's send of it" in first["order"]
    v = got["verdict"]
    assert got["headline"][0] == v["statement"]
    assert v["statement"].startswith("a failure cascade: decode-1 TP0 failed first at ")
    assert (v["kind"], v["host"], v["rank"], v["cause_id"]) == (
        "failure_cascade", "decode-1", 0, "peer-loss")  # fmt: skip
    followed = json.loads(cli("follow", "--cascade", "--db", str(db), "--json").stdout)
    assert followed["lines"][0]["about"] == "first failure"
    assert followed["lines"][0]["raw_ts_us"] == inc.truth["peer_loss_us"]
    assert len(followed["lines"]) == first["echoes"] + 1
    assert {ln["about"] for ln in followed["lines"][1:]} == {"echo"}
    calm = generate_planted("host", seed=0, requests=400)
    files = write_planted(calm, tmp_path / "c")
    forensics.ingest([str(f) for f in files], tmp_path / "c.duckdb")
    quiet = json.loads(cli("report", "--db", str(tmp_path / "c.duckdb"), "--json").stdout)
    assert quiet["first_failure"] is None
    assert quiet["verdict"]["kind"] != "failure_cascade"
    none = cli("follow", "--cascade", "--db", str(tmp_path / "c.duckdb"))
    assert none.returncode != 0 and b"no cascade stands out" in none.stderr
    assert b"Traceback" not in none.stderr


def test_the_docs_say_every_key_of_the_first_failure() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "investigations.md").read_text()
    section = doc[doc.index("### `first_failure`") :]
    for f in fields(C.FirstFailure):
        assert f"`{f.name}`" in section, f.name


def test_the_order_across_hosts_is_said_within_the_clock_bounds() -> None:
    """Decode's first failure, prefill's first echo 30 ms later by their clocks: the skew
    bounds (decode's clock − prefill's) settle the order or say it is within their
    uncertainty; without bounds it holds only if the clocks agree."""
    root = _row(0.0, "decode-1", 0, 1)
    cascade = [root, _row(0.03, "prefill-0", 0, 1), _row(0.05, "decode-1", 1, 1)]
    said = C.order_sentence(root, cascade, {("prefill-0", "decode-1"): (10_000, 90_000)})
    assert said == "before prefill-0's first echo by at least 0.040 s within the clock bounds"
    said = C.order_sentence(root, cascade, {("prefill-0", "decode-1"): (-50_000, 90_000)})
    assert (
        said
        == "the order with prefill-0 is within the clocks' uncertainty (0.020 s short of certain)"
    )
    assert C.order_sentence(root, cascade, {}).startswith(
        "no clock bound between decode-1 and prefill-0: before it by 0.030 s")  # fmt: skip
    first = _row(0.0, "prefill-0", 0, 1)
    other = [first, _row(0.03, "decode-1", 0, 1)]
    said = C.order_sentence(first, other, {("prefill-0", "decode-1"): (None, 20_000)})
    assert said == "before decode-1's first echo by at least 0.010 s within the clock bounds"
    assert C.order_sentence(root, [root], {}) == "one host: its clock orders them"


def test_stock_lines_bound_decodes_clock_from_below(tmp_path: Path) -> None:
    """Decode's clock 5 s ahead of prefill's: each room's Receive on decode (+2 ms) comes
    before prefill's send of it (+100–140 ms, its ReqTimeStats), so decode − prefill is at
    least the largest Receive − send: a bound below the true 5 s and within 0.1 s of it.
    A bootstrap timeout on prefill (which may come before decode's Receive) bounds
    nothing."""
    pre, dec = [], []
    for k in range(20):
        t = 60.0 * k
        stamp = lambda s: f"[2026-11-29 07:{int(s // 60):02d}:{s % 60:06.3f}] "  # noqa: E731
        dec.append(stamp(t + 5.002) + f"Receive: obj=GenerateReqInput(rid='r{k}', text='…' ... , "
                   f"bootstrap_host='10.0.4.11', bootstrap_port=8998, bootstrap_room={100 + k}, "
                   "stream=False)")  # fmt: skip
        pre.append(stamp(t + 0.1 + 0.002 * k) + f"ReqTimeStats(rid=r{k}, bootstrap_room={100 + k}, "
                   "input_len=10, cached_input_len=0, output_len=1, attempts=0, type=prefill): "
                   "bootstrap_duration=0.40ms, queue_duration=1.00ms, forward_duration=80.00ms")  # fmt: skip
    pre.append(
        "[2026-11-29 07:03:00.000] Prefill bootstrap failed for request rank=0 "
        "req.rid='r3' req.bootstrap_room=103 with exception KVTransferError("
        "bootstrap_room=103): Request 103 timed out after 300.0s in KVPoll.Bootstrapping"
    )
    (tmp_path / "p.log").write_text("\n".join(pre) + "\n")
    (tmp_path / "d.log").write_text("\n".join(dec) + "\n")
    db = tmp_path / "s.duckdb"
    forensics.ingest([str(tmp_path / "p.log")], db, host="prefill-0", fmt="sglang", run="r")
    forensics.ingest([str(tmp_path / "d.log")], db, host="decode-0", fmt="sglang", run="r")
    with scoped(db) as s:
        bounds, said_by = C._bounds(s)
    lo, hi = bounds[("prefill-0", "decode-0")]
    assert hi is None and lo == 5_002_000 - 100_000  # room 0's: the largest Receive − send
    assert said_by == {("prefill-0", "decode-0"): C.STOCK_BOUND}
    # prefill's echo 3 s before decode's failure by their clocks; decode's runs ≥ 4.902 s
    # ahead, so decode's came first by at least 1.902 s
    root, echo = _row(1000.0, "decode-0", 0, 1), _row(997.0, "prefill-0", 0, 1)
    got = C.order_sentence(root, [root, echo], bounds, said_by)
    assert got == f"before prefill-0's first echo by at least 1.902 s within {C.STOCK_BOUND}"
    # prefill's failure first: the bound from below cannot settle it, and says so
    got = C.order_sentence(echo, [echo, root], bounds, said_by)
    assert got == (f"between prefill-0 and decode-0 there is only {C.STOCK_BOUND}, on one side: "
                   "before it by 3.000 s only if their clocks agree")  # fmt: skip
