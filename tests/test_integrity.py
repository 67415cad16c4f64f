"""Did the bytes arrive intact, by every check: the `checks` patterns (samples from the
checks' source), the `integrity` view and each request's verdict by each check."""

from __future__ import annotations

import json
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

import forensics
from forensics.analyses.integrity import NOT_ON, SKIPPED, CheckCount, Integrity
from forensics.synthetic.planted import generate_planted, write_planted
from tests.helpers import cli

PATTERNS = Path(__file__).parents[1] / "parsers" / "patterns" / "sglang.toml"


def _sglang(ts: str, msg: str) -> str:
    return f"[2026-11-29 07:{ts}] {msg}\n"


def test_every_checks_sample_is_a_row_of_the_view(tmp_path: Path) -> None:
    """Each check's sample lines, ingested, are rows of `integrity` with the verdict
    their pattern says (the 'on' marker stays in `checks`)."""
    pats = [p for p in tomllib.loads(PATTERNS.read_text())["pattern"] if p["table"] == "checks"]
    samples = [(p, s) for p in pats for s in p["samples"]]
    log = tmp_path / "c.log"
    log.write_text("".join(s["line"] + "\n" for _, s in samples), encoding="utf-8")
    db = tmp_path / "c.duckdb"
    forensics.ingest([str(log)], db, host="decode-0", fmt="sglang")
    _, rows = forensics.query_rows("SELECT checker, verdict, rid FROM integrity", db)
    want = [(s["fields"]["checker"], s["fields"]["verdict"], s["fields"].get("rid"))
            for _, s in samples if s["fields"]["verdict"] != "on"]  # fmt: skip
    assert sorted(rows, key=str) == sorted(want, key=str)
    _, on = forensics.query_rows("SELECT checker, host FROM checks WHERE verdict = 'on'", db)
    assert on == [("sglang_kv_checksum", "decode-0")]
    assert {c for c, *_ in rows} >= {"sglang_kv_checksum", "sglang_metadata_room",
                                     "vllm_kv_checksum", "vllm_ascend_dfx", "mooncake_store"}  # fmt: skip


def test_a_request_is_verified_only_where_the_check_is_known_on(tmp_path: Path) -> None:
    """SGLang's KV checksum on decode-0 (its flag in the server arguments), two mismatches
    there; decode-1 says nothing: its requests are not verified ("not known on"). A skip
    naming no request leaves its host's requests unverified; a harness 500 with the
    checksum body is a mismatch record; a metadata room mismatch carries its note; a
    corrupted request the checksum verified is said (its bytes arrived intact)."""
    inc = generate_planted(None, seed=3, requests=200)
    on_d0 = [r for r in inc.results if r["status"] in ("ok", "corrupted")]
    dec0 = {e.message.split("rid='")[1][:32] for e in inc.decode
            if e.host == "decode-0" and "Receive:" in e.message}  # fmt: skip
    bad = [r["rid"] for r in on_d0 if r["rid"] in dec0][:2]
    inc.results.append({"session": 0, "round": 99, "rid": "f" * 32, "status": "http_error",
                        "corrupted": False, "reason": "HTTP 500: KV checksum mismatch",
                        "start": inc.results[-1]["start"], "end": inc.results[-1]["end"],
                        "concurrency": 8})  # fmt: skip
    files = write_planted(inc, tmp_path / "i")
    extra = tmp_path / "decode0-checks.log"
    extra.write_text(
        _sglang("00:00", "server_args=ServerArgs(model_path='/m', disaggregation_mode='decode', "
                         "disaggregation_enable_kv_checksum=True, tp_size=8)")
        + "".join(_sglang(f"05:0{i}", f"KV checksum mismatch req={rid} bootstrap_room=1 "
                                      "expected=0x1 got=0x2") for i, rid in enumerate(bad))
        + _sglang("06:00", f"Context corruption detected: Request {bad[0]} (bootstrap_room=1) "
                           "received metadata from bootstrap_room=2. Metadata buffer index: 3."),
        encoding="utf-8")  # fmt: skip
    db = tmp_path / "i.duckdb"
    forensics.ingest([str(f) for f in files], db)
    forensics.ingest([str(extra)], db, host="decode-0", fmt="sglang", run=_run(db))
    got = json.loads(cli("report", "--db", str(db), "--json").stdout)["integrity"]
    by = {c["checker"]: c for c in got["checks"]}
    kv = by["sglang_kv_checksum"]
    on_host = sum(1 for r in on_d0 if r["rid"] in dec0)
    assert kv["mismatch"] == 2 and kv["verified"] == on_host - 2
    assert kv["why_not"] == {NOT_ON: got["requests"] - on_host}
    assert by["harness"]["records"] == 1 and by["harness"]["mismatch"] == 0  # unjudged
    room = by["sglang_metadata_room"]
    assert room["mismatch"] == 1 and "sglang#27374" in room["false_positive"][0]["note"]
    assert "the version is not in the logs" in room["false_positive"][0]["note"]
    passed = sum(1 for r in on_d0 if r["rid"] in dec0 and r["corrupted"] and r["rid"] not in bad)
    assert got["passed_corrupted"] == passed
    # a skip naming no request: decode-0's other requests are not verified after all
    skip = tmp_path / "skip.log"
    skip.write_text(_sglang("07:00", "KV checksum skipped: prefill layout signature 0x5 "
                                     "differs from this decode's 0x6 (TP width, PP stage, or "
                                     "page size); its requests are admitted unverified."))  # fmt: skip
    forensics.ingest([str(skip)], db, host="decode-0", fmt="sglang", run=_run(db))
    again = json.loads(cli("report", "--db", str(db), "--json").stdout)["integrity"]
    kv = {c["checker"]: c for c in again["checks"]}["sglang_kv_checksum"]
    assert kv["verified"] == 0 and kv["why_not"][SKIPPED] == on_host - 2


# The incident's own lines that show the metadata room check's false-positive conditions:
# the version as `python -m sglang.check_env` prints it (sglang/check_env.py:
# `print(f"{k}: {v}")` over PACKAGE_LIST), the TCP transport as SGLang 0.5.23's
# srt/arg_groups/pd_disaggregation_hook.py logs it, and decode's load.
TCP_LINE = ("disaggregation transfer backend 'mooncake_tcp' -> mooncake with MC_FORCE_TCP=1 "
            "(TCP transport, no RDMA)")  # fmt: skip
ROOM_ABORT = ("Context corruption detected: Request 0aa1c3e5f7094b2d8e6f1a3c5e7b9d0f "
              "(bootstrap_room=1655955501905217457) received metadata from "
              "bootstrap_room=887504041590801090. Metadata buffer index: 3.")  # fmt: skip


@pytest.mark.parametrize(
    ("version", "tcp", "running", "said"),
    [
        ("0.5.12", True, 48, "stated"),  # every condition shown: a statement, no "possible"
        ("0.5.13", True, 48, None),  # the fix is in: no note
        (None, True, 48, "possible"),  # the version missing: possible, and said missing
        ("0.5.12", False, 8, "possible"),  # no TCP line, low load: possible
    ],
)
def test_the_false_positive_note_follows_the_incidents_own_lines(
    tmp_path: Path, version: str | None, tcp: bool, running: int, said: str | None
) -> None:
    lines = [_sglang("00:00", f"sglang: {version}")] if version else []
    lines += [_sglang("00:01", TCP_LINE)] if tcp else []
    lines += [_sglang("00:02", f"Decode batch, #running-req: {running}, #token: 10, token "
                               "usage: 0.10, gen throughput (token/s): 1.0, #queue-req: 0"),
              _sglang("00:03", ROOM_ABORT)]  # fmt: skip
    log = tmp_path / "decode.log"
    log.write_text("".join(lines), encoding="utf-8")
    db = tmp_path / "fp.duckdb"
    forensics.ingest([str(log)], db, host="decode-0", fmt="sglang")
    _, rows = forensics.query_rows(
        "SELECT known_false_positive FROM integrity WHERE checker = 'sglang_metadata_room'", db
    )
    ((note,),) = rows
    if said is None:
        assert note is None
        return
    assert "sglang#27374" in note and note.endswith("Fix: SGLang 0.5.13 or later")
    assert note.startswith("possible: ") == (said == "possible")
    assert (f"SGLang {version}" in note) == (version is not None)
    assert ("the version is not in the logs" in note) == (version is None)
    assert ("the TCP transport" in note) == tcp
    assert f"{running} concurrent requests at most" in note


def _run(db: Path) -> str:
    _, rows = forensics.query_rows("SELECT run FROM runs", db)
    return rows[0][0]


def test_the_docs_say_every_key() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "investigations.md").read_text()
    section = doc[doc.index("### `integrity`") :]
    for cls in (Integrity, CheckCount):
        for f in fields(cls):
            assert f"`{f.name}`" in section, f.name
