"""py-spy dumps SGLang's watchdog writes into its log (issue 54): the `stacks` view, one
row a thread, from a saved log and from a real journal's rendering."""

from __future__ import annotations

from pathlib import Path

import pytest

import forensics
from forensics.synthetic.journal_writer import export_entry, render, write_journal

# SGLang 0.5.23 srt/utils/cudacore_pyspy_dump_utils.py: logger.error(f"Pyspy dump for PID
# {pid} ({cmd}):\n{result.stdout}"); the dump in py-spy's own form (its README's
# `py-spy dump` output: Process, Python, then each thread and its frames, innermost
# first; --native adds the native frames). The frames are SGLang's decode loop.
HEAD = "Pyspy dump for PID 3001 (py-spy dump --native --pid 3001):"
DUMP = [
    "Process 3001: python3 -m sglang.launch_server --model-path /models/DeepSeek-V3",
    "Python v3.12.3 (/usr/bin/python3.12)",
    "",
    'Thread 3001 (idle): "MainThread"',
    "    cudaStreamSynchronize (libcudart.so.12)",
    "    synchronize (torch/cuda/streams.py:224)",
    "    event_loop_overlap_disagg_decode (sglang/srt/disaggregation/decode.py:1120)",
    'Thread 0x7F3A2C1FD640 (active): "Thread-2 (_poll)"',
    "    poll (sglang/srt/disaggregation/mooncake/conn.py:812)",
]
AFTER = "Watchdog timeout (watchdog_timeout=300)"


def _check(db: Path) -> None:
    _, rows = forensics.query_rows(
        "SELECT host, pid, process, thread, thread_name, state, frames, depth FROM stacks "
        "ORDER BY thread", db)  # fmt: skip
    assert [r[3:6] for r in rows] == [("0x7F3A2C1FD640", "Thread-2 (_poll)", "active"),
                                      ("3001", "MainThread", "idle")]  # fmt: skip
    assert {r[:3] for r in rows} == {("decode-0", 3001, DUMP[0].split(": ", 1)[1])}
    assert rows[1][6][0] == "cudaStreamSynchronize (libcudart.so.12)" and rows[1][7] == 3
    assert rows[0][6] == ["poll (sglang/srt/disaggregation/mooncake/conn.py:812)"]


def test_a_dump_in_a_saved_log_is_one_row_a_thread(tmp_path: Path) -> None:
    log = tmp_path / "decode-0.log"
    log.write_text("[2026-09-20 14:13:40] " + HEAD + "\n" + "\n".join(DUMP) + "\n"
                   "[2026-09-20 14:13:41] " + AFTER + "\n", encoding="utf-8")  # fmt: skip
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(log)], db, fmt="sglang")
    _check(db)


@pytest.mark.parametrize("fmt", ["short-iso-precise", "export"])
def test_a_dump_in_the_journal_is_one_row_a_thread(tmp_path: Path, fmt: str) -> None:
    """SGLang's stdout under systemd: each printed line is an entry of its own, rendered
    by the real journalctl."""
    base = 1_789_913_620_000_000
    lines = [HEAD, *DUMP, AFTER]
    export = b"".join(
        export_entry({"__REALTIME_TIMESTAMP": base + i, "__MONOTONIC_TIMESTAMP": 9_000_000 + i,
                      "_BOOT_ID": "1" * 32, "_HOSTNAME": "decode-0",
                      "SYSLOG_IDENTIFIER": "python3", "_PID": 3001, "PRIORITY": 3,
                      "_SYSTEMD_UNIT": "sglang-decode.service", "MESSAGE": text})
        for i, text in enumerate(lines) if text
    )  # fmt: skip
    raw = tmp_path / "in.export"
    raw.write_bytes(export)
    journals = write_journal(raw, tmp_path / "j" / "decode.journal")
    out = render(journals, fmt, tmp_path / f"decode.{fmt}")
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(out)], db)
    _check(db)


def test_a_log_that_opens_with_a_dump_is_read_by_the_lines_after_it(tmp_path: Path) -> None:
    """The watchdog's dump at the top of a rotated log, 633 lines of it (every line of the
    sniff's window): the log is SGLang's (it was `cat`, the dump 633 untimed entries),
    and the dump reaches `stacks`."""
    frames = [f"    step_{i} (sglang/srt/managers/scheduler.py:{i})" for i in range(620)]
    dump = [*DUMP[:8], *frames, *DUMP[8:]]
    assert len(dump) + 1 >= 633 - 4
    log = tmp_path / "decode-0.log"
    log.write_text("[2026-09-20 14:13:40] " + HEAD + "\n" + "\n".join(dump) + "\n"
                   + "".join(f"[2026-09-20 14:13:{41 + i}] Decode batch. #running-req: {i}\n"
                             for i in range(5)), encoding="utf-8")  # fmt: skip
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(log)], db)
    _, fmt = forensics.query_rows("SELECT format, count(ts_us) FROM sources JOIN entries "
                                  "USING (source_id) GROUP BY ALL", db)  # fmt: skip
    assert fmt == [("sglang", 10)]  # the header, py-spy's own lines, the five after it
    _, rows = forensics.query_rows("SELECT thread, depth FROM stacks ORDER BY thread", db)
    assert rows == [("0x7F3A2C1FD640", 621), ("3001", 3)]
