"""Counts in sentences go through plural.counted: an incident with exactly one of each
counted thing says "1 <thing>", never "1 <things>", in report, suspects, rooms and the
dashboard's text. Lines: the pattern samples of parsers/patterns/sglang.toml (real
SGLang forms, their origins there)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

import forensics
from tests.helpers import cli

LINES = [  # one of each: a transfer failure, an abort, a retraction, a lost prefill, an error
    "[2026-09-20 14:03:31 DP0 TP0 EP0] Decode transfer failed for request rank=0 "
    "decode_req.req.rid='c4e27a90d1b34f0e8e6a1f2b3c4d5e6f' decode_req.req.bootstrap_room="
    "5512093348812734411 with exception KVTransferError(bootstrap_room=5512093348812734411): "
    "Request 5512093348812734411 timed out after 300.0s in KVPoll.WaitingForInput",
    "[2026-09-20 14:03:33 TP0] Abort running request. req.rid='9b1f0c2e4d5a47f7a1e3c0d2b4f6a8c1'",
    "[2026-09-20 14:03:35 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_token_ratio: 0.1427 -> 0.3414",
    "[2026-09-20 14:03:39 DP0 TP0 EP0] Lost connection with prefill instance (bootstrap_addr: "
    "10.0.4.11:8998), 7 transfers affected",
    "[2026-09-20 14:03:40 TP0] RuntimeError: CUDA error: an illegal memory access was encountered",
]
# words that end in s and are one thing
SINGULAR = {"status", "process", "bus", "class", "access", "pass", "alias", "analysis", "axis"}
PLURAL_AFTER_ONE = re.compile(r"(?<![\d.,:/-])\b1 ([a-z][a-z-]*s)\b")


def _said(text: str) -> list[str]:
    return [w for w in PLURAL_AFTER_ONE.findall(text) if w not in SINGULAR]


def test_one_of_each_counted_thing_is_said_in_the_singular(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    log.write_text("\n".join(LINES) + "\n")
    results = tmp_path / "results.jsonl"
    results.write_bytes(orjson.dumps({
        "session": 0, "round": 0, "rid": "9b1f0c2e4d5a47f7a1e3c0d2b4f6a8c1", "corrupted": True,
        "reason": "tool-call markup in content", "status": "corrupted",
        "start": 1_789_913_013.0, "end": 1_789_913_014.0, "concurrency": 1}) + b"\n")  # fmt: skip
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(log), str(results)], db, host="decode-0", fmt="sglang")
    for command in (["report"], ["report", "--json"], ["suspects"], ["rooms"]):
        proc = cli(*command, "--db", str(db), env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        assert not _said(proc.stdout.decode()), (command, _said(proc.stdout.decode()))
    page = forensics.dashboard(db, out=tmp_path / "d.html").path.read_text()
    text = re.sub(r"<[^>]+>", " ", page.split("<script", 1)[0])
    assert not _said(text), _said(text)
    said = " ".join(forensics.report(db).sentences())
    assert "SGLang logged 1 KV transfer failure:" in said, said
    assert "1 traceback or CUDA/NCCL error; the first:" in said
    assert "1 abort logged" in said and "1 retraction (" in said and "1 minute with" in said
