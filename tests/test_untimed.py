"""Entries without a time: each takes the time of the timed entry before it in its source;
those before the source's first time keep none, and no command trips over them (issue:
a five-line `-o cat` file with a traceback ended `report` in an unexpected TypeError)."""

from __future__ import annotations

from pathlib import Path

import pytest

import forensics
from forensics.cli import main

BATCH = (
    "[2026-03-01 10:00:0{s} DP0 TP0] Decode batch, #running-req: 3, #token: 100, "
    "token usage: 0.01, cuda graph: True, gen throughput (token/s): 10.0, #queue-req: 0"
)
TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'

# hand-written edge cases: untimed lines first, in the middle and last
UNTIMED_FIRST_MIDDLE_LAST = (
    f"{TRACEBACK}RuntimeError: before any time\n{BATCH.format(s=0)}\n"
    f"{TRACEBACK}RuntimeError: boom\n{BATCH.format(s=1)}\n"
    "ERROR: NIXL_ERR_NOT_FOUND after the last time\n"
)
# the five lines: a batch line, a three-line traceback, a batch line
FIVE = f"{BATCH.format(s=0)}\n{TRACEBACK}RuntimeError: boom\n{BATCH.format(s=1)}\n"

COMMANDS = (
    ("report",),
    ("report", "--json"),
    ("trace", "--out", "{dir}/t.pftrace"),
    ("follow", "--cascade"),
    ("suspects",),
    ("suspects", "--plan", "{dir}/plan.toml"),
    ("rooms",),
)
# the page and the bundle read what report reads: once, on the issue's own file
WHOLE = (("dashboard", "--out", "{dir}/d.html"), ("bundle", "--out", "{dir}/b.tar.zst"))


def _ingest(tmp_path: Path, text: str) -> Path:
    log, db = tmp_path / "decode.log", tmp_path / "t.duckdb"
    log.write_text(text, encoding="utf-8")
    forensics.ingest([str(log)], db, fmt="cat", host="decode-0")
    return db


def _times(db: Path) -> list[tuple]:
    _, rows = forensics.query_rows(
        "SELECT entry_no, ts_us, ts_inherited FROM entries ORDER BY entry_no", db
    )
    return rows


def test_an_untimed_entry_takes_the_time_before_it(tmp_path: Path) -> None:
    db = _ingest(tmp_path, UNTIMED_FIRST_MIDDLE_LAST)
    t0, t1 = 1772359200000000, 1772359201000000  # 2026-03-01 10:00:00 and :01 UTC
    assert _times(db) == [
        (0, None, False), (1, None, False), (2, None, False),  # before the first time
        (3, t0, False), (4, t0, True), (5, t0, True), (6, t0, True),
        (7, t1, False), (8, t1, True),
    ]  # fmt: skip
    (src,) = forensics.list_sources(db)
    assert any("4 entries without a time of their own took the time" in n for n in src["notes"])
    assert any("3 entries have no time" in n for n in src["notes"])
    # the failures view leaves the untimed traceback out; the report says how many
    _, rows = forensics.query_rows("SELECT count(*) FROM failures WHERE ts_us IS NULL", db)
    assert rows == [(0,)]
    said = forensics.report(db).coverage.sentences()
    assert any(s.startswith("3 entries with no time") for s in said), said
    trace = forensics.trace(db, tmp_path / "t.pftrace")
    assert "3 entries with no time left out (none of their own, none before them in their " \
           "source)" in trace.notes  # fmt: skip


def test_a_source_with_no_time_at_all_is_left_out_of_the_failures(tmp_path: Path) -> None:
    db = _ingest(tmp_path, f"{TRACEBACK}RuntimeError: never timed\nERROR: and no time\n")
    assert forensics.query_rows("SELECT count(*) FROM failures", db)[1] == [(0,)]
    rep = forensics.report(db)
    assert rep.first_failure is None and rep.coverage.untimed == 4


@pytest.mark.parametrize("text", [FIVE, UNTIMED_FIRST_MIDDLE_LAST],
                         ids=["five-lines", "first-middle-last"])  # fmt: skip
def test_every_command_runs_over_untimed_entries(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _ingest(tmp_path, text)
    capsys.readouterr()
    for args in (
        *COMMANDS,
        *(WHOLE if text == FIVE else ()),
    ):  # in this process: the CLI's own main, its exits and stderr
        try:
            main(["--db", str(db), *(a.format(dir=tmp_path) for a in args)])
            code = 0
        except SystemExit as exc:
            code = exc.code
        err = capsys.readouterr().err
        assert "unexpected" not in err and "Traceback" not in err, (args, err)
        assert code in (0, 2, None), (args, code, err)
        if code == 2:  # nothing to follow: one line saying so
            assert err.count("\n") == 1 and err.startswith("error: "), (args, err)
