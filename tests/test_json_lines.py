"""JSON-lines logs told apart by their keys, each a declaration (parsers/jsonlines.py):
zap's JSON, Dynamo's JSONL however it is spaced, any other JSON log — never a journal
entry with an empty message."""

from __future__ import annotations

from pathlib import Path

import pytest
from forensics.parsers.formats import json_formats_markdown, sniff_input
from forensics.parsers.jsonlines import DECLARED

import forensics
from forensics.store import connect_read_only

ROOT = Path(__file__).resolve().parent.parent
# llm-d/llm-d-router#255 (the inference scheduler's EPP, v0.2.0-rc2)
ZAP = """\
{"level":"info","ts":"2025-07-21T16:54:54Z","logger":"setup","caller":"runner/runner.go:267","msg":"Enabling pprof handlers"}
{"level":"Level(-2)","ts":"2025-07-21T16:54:54Z","caller":"manager/internal.go:196","msg":"Registering metrics http server extra handler","path":"/debug/pprof/heap"}
"""
# the docs' Dynamo JSONL line (ai-dynamo/dynamo docs/observability/logging.md), as Python's
# json.dumps writes it (": " and ", "): the sniffer wanted the exact bytes `{"time":"`
DYNAMO_SPACED = (
    '{"time": "2025-10-31T21:06:45.418584Z", "level": "ERROR", "target": "dynamo_llm::http::service", '
    '"message": "request completed with internal error", "x_request_id": "8372eac7-5f43-4d76-beca-0a94cfb311d0", '
    '"status": 500}\n'
)  # fmt: skip
# an application's own JSON lines (no journald field, no known keys but the common ones)
APP = """\
{"timestamp": "2026-03-01T10:00:00Z", "severity": "ERROR", "message": "transfer failed", "request_id": "r-123", "peer": "10.0.0.2:7000"}
{"timestamp": "2026-03-01T10:00:01Z", "level": "INFO", "answer": 42}
"""
FIRST_LINES = {  # one first line per declaration
    "docker-json": b'{"log":"[2026-01-01 00:00:00] x\\n","stream":"stdout","time":"2026-01-01T00:00:00Z"}',
    "sglang-metrics": b'{"request_parameters": {"rid": "x"}, "request_received_ts": 1}',
    "dynamo-request-trace": b'{"schema":"dynamo.request.trace.v1","event_type":"request_end",'
                            b'"event_time_unix_ms":1100,"request":{"request_id":"req-1"}}',
    "dynamo-jsonl": DYNAMO_SPACED.encode().strip(),
    "zap": ZAP.splitlines()[0].encode(),
    "json": b'{"__REALTIME_TIMESTAMP":"1","MESSAGE":"x","_HOSTNAME":"h"}',
    "json-log": APP.splitlines()[1].encode(),
}  # fmt: skip


@pytest.mark.parametrize("name", [d.name for d in DECLARED])
def test_each_declaration_is_sniffed_by_its_keys(name: str) -> None:
    assert sniff_input(FIRST_LINES[name] + b"\n") == name


def test_the_declarations_are_documented_in_their_order() -> None:
    docs = (ROOT / "docs" / "details.md").read_text(encoding="utf-8")
    assert "\n".join("  " + ln for ln in json_formats_markdown().splitlines()) in docs


def _rows(tmp: Path, name: str, text: str) -> tuple[str, list[tuple]]:
    path = tmp / name
    path.write_text(text, encoding="utf-8")
    db = tmp / f"{name}.duckdb"
    forensics.ingest([str(path)], db, host="h")
    con = connect_read_only(db)
    fmt = con.execute("SELECT format FROM sources").fetchall()[0][0]
    rows = con.execute("""SELECT e.ts_us, e.message, l.level, l.named FROM entries e
                          JOIN lines l USING (source_id, entry_no) ORDER BY entry_no""").fetchall()
    return fmt, rows


def test_zap_json_is_read_with_its_time_message_and_values(tmp_path: Path) -> None:
    fmt, rows = _rows(tmp_path, "epp.log", ZAP)
    assert fmt == "zap" and rows[0][0] == 1753116894000000
    assert rows[0][1] == "Enabling pprof handlers"  # was one templated string of JSON
    assert rows[1][1] == "Registering metrics http server extra handler path=/debug/pprof/heap"
    assert rows[1][3] == {"path": "/debug/pprof/heap"}


def test_dynamo_jsonl_with_spaces_is_dynamo(tmp_path: Path) -> None:
    fmt, rows = _rows(tmp_path, "frontend.jsonl", DYNAMO_SPACED)
    assert fmt == "dynamo-jsonl"
    assert "request completed with internal error" in rows[0][1] and rows[0][2] == "error"


def test_an_application_json_log_is_never_an_empty_journal_entry(tmp_path: Path) -> None:
    fmt, rows = _rows(tmp_path, "app.jsonl", APP)
    assert fmt == "json-log"
    assert rows[0][1] == "transfer failed request_id=r-123 peer=10.0.0.2:7000"
    assert rows[0][2] == "error" and rows[0][3]["peer"] == "10.0.0.2:7000"
    assert rows[1][1] == APP.splitlines()[1]  # no message key: the line is the message
    assert all(r[1] for r in rows)
