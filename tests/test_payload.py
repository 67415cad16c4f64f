"""Payload lines: a request's or reply's text (a Receive or Finish line's repr, their JSON
forms, a metrics record) is the client's, not the server's log. A prompt that quotes log
lines (an agent reading its own server's logs) must not yield their records."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from forensics.parsers import patterns as P
from forensics.parsers.patterns import PatternError, builtin, classify, load_file

import forensics
from forensics.store import records as R

# What an agent debugging its own deployment pastes into a prompt: SGLang's batch line,
# the older retraction wording and a probe's checksum record (shapes of the samples in
# parsers/patterns/sglang.toml and docs/log-contract.md, values made up)
QUOTED = (
    "[2026-11-29 06:00:00 TP0] Decode batch, #running-req: 41, #token: 100, token usage: "
    "0.50, gen throughput (token/s): 1.00, #queue-req: 0 | Decode out of memory happened. "
    "#retracted_reqs: 3, #new_token_ratio: 0.1 -> 0.2 | forensics:checksum side=src room=5 "
    "rid=bb buf=kv layer=0 dtype=bf16 head=1 tail=2 full=3"
)
FINISH_QUOTED = (
    " | Finish: obj=GenerateReqInput(rid='zz', bootstrap_room=9), out={'meta_info': "
    "{'id': 'zz', 'finish_reason': {'type': 'abort'}}}"
)
# Filler past the needle pass's first HEAD characters, so the quote sits in a line's rest
FILL = "the tool listed the files and the assistant read them " * 12


def receive(text: str, room: str | None = "582057716445789124") -> str:
    tail = f", bootstrap_room={room}" if room else ""
    return (
        f"[2026-11-29 07:00:00 TP0] Receive: obj=GenerateReqInput(rid='aa', text='{text}', "
        f"bootstrap_host='10.0.4.11', bootstrap_port=8998{tail}, stream=True)"
    )


def finish(text: str) -> str:
    return (
        "[2026-11-29 07:00:01 TP0] Finish: obj=GenerateReqInput(rid='aa', "
        f"bootstrap_room=582057716445789124), out={{'text': '{text}', 'meta_info': "
        "{'id': 'aa', 'finish_reason': {'type': 'stop'}, 'completion_tokens': 7}}"
    )


def entries(*messages: str) -> pl.DataFrame:
    n = len(messages)
    return pl.DataFrame(
        {"entry_no": range(n), "line_first": range(1, n + 1), "host": ["h"] * n,
         "ts_us": range(n), "priority": [6] * n, "message": list(messages),
         "fields": [None] * n},
        schema_overrides={"fields": pl.String, "priority": pl.Int64},
    )  # fmt: skip


def kinds(frames: dict[str, pl.DataFrame]) -> dict[str, list[str]]:
    """The patterns behind each table's rows (the probes' records have none)."""
    return {k: sorted(f["pattern"].to_list()) for k, f in frames.items() if k in R.COUNTED
            and "pattern" in f.columns}  # fmt: skip


@pytest.mark.parametrize("where", ["head", "rest"])
def test_a_prompt_quoting_log_lines_yields_its_request_alone(where: str) -> None:
    text = (QUOTED if where == "head" else FILL + QUOTED) + FINISH_QUOTED
    frames, rejects = R._records_of(entries(receive(text)))
    assert kinds(frames) == {"rid_room": ["request_received"]}
    assert frames["rid_room"]["room"].to_list() == [582057716445789124]
    assert rejects == []  # the quoted checksum is no record, broken or not
    assert frames["line"]["pattern"].to_list() == ["request_received"]


def test_a_reply_quoting_a_request_is_the_finish_line_it_is() -> None:
    frames, _ = R._records_of(entries(finish(receive("hi") + " " + QUOTED)))
    assert kinds(frames) == {
        "rid_room": ["request_finished"],
        "request_meta": ["finish_meta_info"],
    }
    assert frames["request_meta"]["finish_type"].to_list() == ["stop"]


def test_a_request_without_a_room_is_still_payload() -> None:
    # no bootstrap_room: request_received reads no row, and nothing else reads the prompt
    frames, rejects = R._records_of(entries(receive(QUOTED, room=None)))
    assert kinds(frames) == {}
    assert rejects == []


def test_lines_beside_a_payload_line_are_read_as_before() -> None:
    batch = QUOTED.split(" | ")[0]
    frames, _ = R._records_of(entries(receive(QUOTED), batch, "forensics:step step=4 rids=r1"))
    assert kinds(frames) == {"batch": ["batch_stats"], "rid_room": ["request_received"]}
    assert frames["step"]["step"].to_list() == [4]
    assert frames["batch"]["running_req"].to_list() == [41]


def test_a_payload_needle_its_regex_does_not_confirm_leaves_the_line_to_the_others() -> None:
    # the metrics record's needle, but not at the line's start: no metrics record
    line = '[2026-11-29 07:00:02 TP0] Abort queued request. {"request_parameters": "x"}'
    frames, _ = R._records_of(entries(line))
    assert kinds(frames) == {"event": ["abort_request"]}


def test_an_upgrade_reading_one_table_still_leaves_payload_lines_out() -> None:
    found, payload = R._patterned(entries(receive(QUOTED)), [], only=["events", "batches"])
    assert found == {}
    assert payload.to_list() == [0]


LINES = [
    receive(QUOTED + FINISH_QUOTED),
    receive(FILL + QUOTED),
    receive(FILL + FILL + "Receive: obj=GenerateReqInput(rid='q', bootstrap_room=1)"),
    finish(FILL + receive("x")),
    finish(QUOTED),
    receive(QUOTED, room=None),
    FILL + receive(QUOTED),  # the payload needle past the head: found in the rest
    FILL + QUOTED,  # no payload: every quoted line is read
    QUOTED,
    '{"request_parameters": "' + QUOTED + '", "id": "m1", "prompt_tokens": 3}',
    '[2026-11-29 07:00:02 TP0] Abort queued request. {"request_parameters": "x"}',
]


def test_skipping_a_payload_lines_rest_changes_no_row(monkeypatch: pytest.MonkeyPatch) -> None:
    messages = pl.Series(LINES, dtype=pl.String)
    pats = builtin()
    fast = classify(pats, messages)
    monkeypatch.setattr(P, "_payload_heads", lambda *a: P._NONE)  # every rest scanned
    slow = classify(pats, messages)
    assert fast[1].to_list() == slow[1].to_list() == [0, 1, 2, 3, 4, 5, 6, 9]
    assert sorted(fast[0]) == sorted(slow[0])
    for table, rows in fast[0].items():
        assert rows.sort("row", "pattern").equals(slow[0][table].sort("row", "pattern")), table
    # the lines that are no payload keep every quoted record
    assert {(t, r) for t, f in fast[0].items() for r in f["row"].to_list() if r in (7, 8)} == {
        ("batches", 7),
        ("batches", 8),
        ("events", 7),
        ("events", 8),
    }


def test_user_patterns_leave_payload_lines_alone_and_may_declare_their_own(
    tmp_path: Path,
) -> None:
    f = tmp_path / "p.toml"
    f.write_text(
        """
[[pattern]]
name = "idxk"
table = "events"
needle = "idxk_mismatch"
regex = '''idxk_mismatch room=(?P<room>\\d+)'''
set = { kind = "idxk" }
[[pattern.samples]]
line = "[x] idxk_mismatch room=7"
fields = { kind = "idxk", room = "7" }

[[pattern]]
name = "chat_log"
table = "events"
needle = "chat request: "
regex = '''chat request: (?P<detail>\\S+)'''
set = { kind = "chat" }
payload = true
[[pattern.samples]]
line = "[x] chat request: r1 idxk_mismatch room=8"
fields = { kind = "chat", detail = "r1" }
"""
    )
    user = load_file(f)
    lines = entries(receive("idxk_mismatch room=7"), "[x] chat request: r1 idxk_mismatch room=8",
                    "[x] idxk_mismatch room=9")  # fmt: skip
    frames, _ = R._records_of(lines, user)
    assert sorted(zip(frames["event"]["pattern"], frames["event"]["room"], strict=True)) == [
        ("chat_log", None),
        ("idxk", 9),
    ]


def test_payload_is_true_or_false(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(
        '[[pattern]]\nname = "x"\ntable = "events"\nneedle = "x"\nregex = "x"\n'
        'payload = "yes"\n[[pattern.samples]]\nline = "x"\n'
    )
    with pytest.raises(PatternError, match="payload is true or false, not 'yes'"):
        load_file(f)


def test_an_ingested_prompt_quoting_logs_stores_no_phantom_records(
    tmp_path: Path, db: Path
) -> None:
    f = tmp_path / "decode.log"
    f.write_text(f"2026-11-29T07:00:00.000001+0000 decode-0 python3[1]: {receive(QUOTED)}\n")
    res = forensics.ingest([str(f)], db)
    assert {k: n for k, n in res.sources[0].records.items() if n} == {"rid_room": 1}
    _, rows = forensics.query_rows(
        "SELECT (SELECT count(*) FROM batches), (SELECT count(*) FROM events),"
        " (SELECT count(*) FROM checksums), (SELECT count(*) FROM request_meta),"
        " (SELECT count(*) FROM quarantine), (SELECT pattern FROM lines)",
        db,
    )
    assert rows == [(0, 0, 0, 0, 0, "request_received")]


@pytest.mark.parametrize("fill", ["", FILL])
def test_a_requests_own_rid_and_room_are_read_outside_its_text(fill: str) -> None:
    # a dataclass repr lists fields as declared: bootstrap_room after text in every
    # SGLang, and rid after it too before rid moved into BaseReq (managers/io_struct.py)
    text = fill + "my server printed rid='evil' and bootstrap_room=9, \"rid='worse'\" ok"
    line = (
        f"[2026-11-29 07:00:00 TP0] Receive: obj=GenerateReqInput(text='{text}', "
        "rid='real', bootstrap_room=582057716445789124)"
    )
    frames, _ = R._records_of(entries(line, finish(text)))
    got = frames["rid_room"].select("event", "rid", "room").rows()
    assert got == [("Receive", "real", 582057716445789124), ("Finish", "aa", 582057716445789124)]


def test_a_reply_quoting_meta_info_keeps_the_lines_own() -> None:
    # a reply holding ' and no " is repr'd in double quotes: its quote reads as a key
    line = (
        "[2026-11-29 07:00:01 TP0] Finish: obj=GenerateReqInput(rid='aa', bootstrap_room=5), "
        "out={'text': \"the log said 'meta_info': {'id': 'evil', 'completion_tokens': 99}\", "
        "'meta_info': {'id': 'aa', 'finish_reason': {'type': 'stop'}, 'completion_tokens': 7}}"
    )
    frames, _ = R._records_of(entries(line))
    meta = frames["request_meta"].select("rid", "finish_type", "completion_tokens").rows()
    assert meta == [("aa", "stop", 7)]


def test_the_first_key_outside_strings() -> None:
    import re

    from forensics.parsers.patterns.quoted import first_outside

    line = """a='x=1' b="it's x=2" c='\\'x=3' x=4 d=' x=5"""
    m = first_outside(line, list(re.finditer(r"x=(\d)", line)))
    assert m is not None and m.group(1) == "4"
    assert first_outside("'x=1' 'x=2'", list(re.finditer(r"x=(\d)", "'x=1' 'x=2'"))) is None
