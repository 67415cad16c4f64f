"""Plain logs (SGLang's stdout, docker, kubectl): times from the lines themselves, hosts
from the file name, tracebacks joined, every line accounted for."""

from __future__ import annotations

from pathlib import Path

import orjson

import forensics


def _entries(db: Path) -> list[tuple]:
    return forensics.query_rows(
        "SELECT ts_us, host, line_first, line_last, message, fields FROM entries"
        " ORDER BY source_id, entry_no",
        db,
    )[1]


def test_time_only_prefixes_dated_from_lines_around(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "prefill-3.stdout.log"
    path.write_text(
        "[23:59:58 TP0] Prefill batch. #new-seq: 1, #new-token: 5, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0\n"
        '[2026-09-20 23:59:59] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK\n'
        "[00:00:01 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0\n"
    )
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].format == "sglang" and res.sources[0].records["batch"] == 2
    rows = _entries(db)
    day = 1_789_862_400_000_000  # 2026-09-20 00:00 UTC
    hour = 3_600_000_000
    assert [r[0] for r in rows] == [
        day + 24 * hour - 2_000_000,  # dated by the line after it
        day + 24 * hour - 1_000_000,
        day + 24 * hour + 1_000_000,  # past midnight: the next day
    ]
    assert {r[1] for r in rows} == {"prefill-3"}


def test_tracebacks_join_their_entry_and_blank_lines_are_counted(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "d.log"
    path.write_text(
        "[2026-09-20 14:03:13 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 2345, in run_scheduler_process\n'
        "    scheduler.event_loop_overlap()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: boom\n"
        "[2026-09-20 14:03:14] after\n"
    )
    res = forensics.ingest([str(path)], db, host="decode-7")
    src = res.sources[0]
    rows = _entries(db)
    assert [(r[2], r[3]) for r in rows] == [(1, 4), (6, 8), (9, 9)]
    assert rows[0][4].endswith("illegal memory access was encountered")
    assert rows[1][0] == rows[0][0]  # no time of its own: the one before
    assert rows[0][1] == "decode-7"
    _, m = forensics.query_rows("SELECT lines, markers FROM sources", db)
    assert m == [(9, 1)] and src.quarantined == 0


def test_docker_json_file_and_kubectl_timestamps(tmp_path: Path, db: Path) -> None:
    docker = tmp_path / "0123456789abcdef0123-json.log"
    pieces = [
        {"log": "[2026-09-20 14:03:12 TP0] Decode batch, #running-req: 5, #token: 20800, ",
         "stream": "stdout", "time": "2026-09-20T14:03:12.5Z"},
        {"log": "token usage: 0.29, cuda graph: True, gen throughput (token/s): 1.0, #queue-req: 0\n",
         "stream": "stdout", "time": "2026-09-20T14:03:12.5Z"},
        {"log": "oops", "stream": 3},
    ]  # fmt: skip
    docker.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in pieces) + b"not json\n")
    kube = tmp_path / "decode-0.log"
    kube.write_text(
        "2026-09-20T14:03:12.123456789Z [2026-09-20 14:03:12 TP0] Receive: obj=GenerateReqInput(rid='r1', bootstrap_room=77)\n"
        "2026-09-20T14:03:13.000000001Z Traceback (most recent call last):\n"
        "2026-09-20T14:03:13.000000001Z ValueError: boom\n"
    )
    res = forensics.ingest([str(docker), str(kube)], db)
    d, k = res.sources
    assert (d.format, k.format) == ("docker-json", "timestamped")
    assert d.records["batch"] == 1 and d.quarantined == 1  # docker's 16 KiB pieces joined
    assert k.records["rid_room"] == 1
    rows = _entries(db)
    assert rows[0][0] == 1_789_912_992_500_000 and rows[0][1] == "0123456789ab"
    assert orjson.loads(rows[0][5]) == {"stream": "stdout"}
    assert rows[-2][0] == 1_789_912_992_123_456 and rows[-2][1] == "decode-0"
    assert rows[-1][4] == "Traceback (most recent call last):\nValueError: boom"


def test_time_only_prefixes_around_a_date_change(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "d.log"
    path.write_text(
        "[23:59:58 TP0] before the first date: the day before\n"
        "[2026-09-21 00:00:01] the first date\n"
        "[23:30:00 TP0] still 09-21\n"
        "[2026-09-22 01:00:00] a later date\n"
        "[01:05:00 TP0] 09-22, not 09-23\n"
    )
    forensics.ingest([str(path)], db)
    got = [r[0] for r in _entries(db)]
    day = 1_789_862_400_000_000  # 2026-09-20 00:00 UTC
    s = 1_000_000
    assert got == [
        day + 86_398 * s,
        day + 86_400 * s + 1 * s,
        day + 86_400 * s + 84_600 * s,
        day + 2 * 86_400 * s + 3_600 * s,
        day + 2 * 86_400 * s + 3_900 * s,
    ]


def test_a_traceback_ends_at_a_line_of_a_known_form(tmp_path: Path, db: Path) -> None:
    """After its exception line, CUDA's advice continues the message; uvicorn's access
    line, an unprefixed stats line a pattern reads and another traceback do not."""
    path = tmp_path / "d.log"
    path.write_text(
        "[2026-09-20 14:03:13 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 2345, in run_scheduler_process\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        'INFO:     10.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n'
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ValueError: boom\n"
        "Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, gen throughput "
        "(token/s): 1.0, #queue-req: 0\n"
    )
    forensics.ingest([str(path)], db, host="decode-7", fmt="sglang")
    rows = _entries(db)
    assert [(r[2], r[3]) for r in rows] == [(1, 5), (6, 6), (7, 9), (10, 10)]
    assert rows[0][4].endswith("For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
    assert rows[1][4].startswith("INFO:")
    ((n,),) = forensics.query_rows("SELECT count(*) FROM batches", db)[1]
    assert n == 1  # the stats line is its own entry, read by its pattern


def test_a_traceback_from_the_field_keeps_cudas_advice(tmp_path: Path, db: Path) -> None:
    """As pasted in sgl-project/sglang#3713 (2025-02): the exception, CUDA's three advice
    lines, a blank line, then the next prefixed line."""
    path = tmp_path / "decode.log"
    path.write_text(
        "[2025-02-21 22:59:28 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1825, in '
        "run_scheduler_process\n"
        "    scheduler.event_loop_overlap()\n"
        '  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/streams.py", line 100, in '
        "synchronize\n"
        "    super().synchronize()\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
        "\n"
        "[2025-02-21 22:59:28] Received sigquit from a child proces. It usually means the child "
        "failed.\n"
    )  # fmt: skip
    forensics.ingest([str(path)], db, host="decode-0", fmt="sglang")
    rows = _entries(db)
    assert [(r[2], r[3]) for r in rows] == [(1, 9), (11, 11)]
    assert rows[0][4].endswith(
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
    )
    ((kinds,),) = forensics.query_rows("SELECT list(DISTINCT kind ORDER BY kind) FROM events", db)[
        1
    ]
    assert "cuda_error" in kinds or "traceback" in kinds


def test_the_pd_stacks_own_stamps_give_times(tmp_path: Path, db: Path) -> None:
    """glog with and without its year (Mooncake, NIXL), vLLM's month-day, UCX's epoch
    seconds: each line its own time; a stamp without a year takes the dated line's."""
    path = tmp_path / "decode-0.log"
    path.write_text(
        "[2026-12-31 23:59:58] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0\n"
        "E1231 23:59:59.250000 4058290 worker_pool.cpp:294] Worker: Process failed for slice (opcode: 1, length: 3584): local protection error\n"
        "W0101 00:00:01.500000 77969 transfer_metadata.cpp:153] Failed to retrieve segment descriptor, name 10.6.131.6_x\n"
        "(Worker_TP0_EP0 pid=865) ERROR 01-01 00:00:02 [nixl_connector.py:1263] NIXL transfer failure: handshake_setup_failed\n"
        "I20270101 00:00:03.000001 366 transfer_engine.cpp:387] [Metrics] Transfer Engine Throughput: 113.07 MB/s (over last 5s)\n"
        "[1798761604.896649] [gpu-3:537  :1]       srd_iface.c:221  UCX  ERROR send completion[0] with error on rdmap132s0/0x55: Work Request Flushed Error\n"
    )  # fmt: skip
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].format == "sglang" and res.sources[0].quarantined == 0
    new_year = 1_798_761_600_000_000  # 2027-01-01 00:00 UTC
    assert [r[0] for r in _entries(db)] == [
        new_year - 2_000_000,
        new_year - 750_000,
        new_year + 1_500_000,  # January after December: the next year
        new_year + 2_000_000,
        new_year + 3_000_001,
        new_year + 4_896_649,
    ]


def test_stamps_without_a_year_and_no_dated_line_say_where_the_year_came_from(
    tmp_path: Path, db: Path
) -> None:
    path = tmp_path / "prefill-0.log"
    path.write_text(
        "E0917 16:23:13.204995 4058290 worker_pool.cpp:294] Worker: Process failed for slice (opcode: 1, length: 3584): local protection error\n"
        "[1726590194.000000] [gpu-3:4058:0]     ucp_worker.c:1866 UCX  ERROR failed to connect\n"
    )  # fmt: skip
    import os

    os.utime(path, (1_726_600_000, 1_726_600_000))  # 2024-09-17
    res = forensics.ingest([str(path)], db)
    src = res.sources[0]
    assert src.format == "sglang"  # not journalctl's short-monotonic: 10 digits are epoch s
    assert any("no year" in n and "2024" in n for n in src.notes)
    assert [r[0] for r in _entries(db)] == [1_726_590_193_204_995, 1_726_590_194_000_000]


def test_a_launchers_stamp_around_sglangs_own(tmp_path: Path, db: Path) -> None:
    """A launcher that logs the service's stdout with a stamp of its own: SGLang's stamp
    times the entry, the launcher's words go to fields, the offset is noted once, and the
    template is the unwrapped line's (hand-written: the launcher's shape is the user's)."""
    path = tmp_path / "decode-0.log"
    path.write_text(
        "2026-09-20 10:00:01,250 INFO launcher: [2026-09-20 10:00:00 TP0] Decode batch. #running-req: 1, #token: 9, token usage: 0.00, gen throughput (token/s): 1.00, #queue-req: 0\n"
        "2026-09-20 10:00:02,750 INFO launcher: [2026-09-20 10:00:02 TP0] Register kv tensors, len(kv_addr)= 56\n"
        "[2026-09-20 10:00:03 TP0] Register kv tensors, len(kv_addr)= 61\n"
    )  # fmt: skip
    res = forensics.ingest([str(path)], db)
    src = res.sources[0]
    assert src.format == "sglang" and src.records["batch"] == 1
    day = 1_789_862_400_000_000 + 10 * 3_600_000_000  # 2026-09-20 10:00 UTC
    rows = _entries(db)
    assert [r[0] for r in rows] == [day, day + 2_000_000, day + 3_000_000]
    assert all(r[4].startswith("[2026-09-20 10:00:0") for r in rows)
    assert [orjson.loads(r[5] or "{}").get("LAUNCHER_PREFIX") for r in rows] == [
        "2026-09-20 10:00:01,250 INFO launcher:",
        "2026-09-20 10:00:02,750 INFO launcher:",
        None,
    ]
    (said,) = [n for n in src.notes if "launcher" in n]
    assert "2 lines" in said and "+1.250 s" in said and "+0.750" in said
    texts = forensics.query_rows("SELECT DISTINCT text FROM lines WHERE pattern IS NULL", db)[1]
    assert texts == [("Register kv tensors, len(kv_addr)= <n>",)]  # wrapped or not: one


def test_sglangs_logging_config_formats(tmp_path: Path, db: Path) -> None:
    """SGLANG_LOGGING_CONFIG_PATH's format from its PR (sgl-project/sglang#4592:
    `%(asctime)s %(levelname)s %(process)d [%(filename)s:%(lineno)d] %(message)s`) and a
    bracketed `[time][file:line][LEVEL]` one: times from the line, the level stated, the
    template equal to the default prefix's."""
    path = tmp_path / "prefill-0.log"
    path.write_text(
        "2026-09-20 10:00:00 INFO 8211 [scheduler.py:1302] Prefill batch. #new-seq: 1, #new-token: 5, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0\n"
        "[2026-09-20 10:00:01][scheduler.py:1302][WARNING] Prefill batch. #new-seq: 2, #new-token: 5, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0\n"
        "[2026-09-20 10:00:02 TP0] Prefill batch. #new-seq: 3, #new-token: 5, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0\n"
    )  # fmt: skip
    res = forensics.ingest([str(path)], db)
    assert res.sources[0].format == "sglang" and res.sources[0].records["batch"] == 3
    day = 1_789_862_400_000_000 + 10 * 3_600_000_000
    assert [r[0] for r in _entries(db)] == [day, day + 1_000_000, day + 2_000_000]
    got = forensics.query_rows(
        "SELECT count(DISTINCT template), list(level ORDER BY entry_no) FROM lines", db
    )[1]
    assert got == [(1, ["info", "warning", None])]


DYNAMO_DOCS = (  # ai-dynamo/dynamo docs/observability/logging.md, as printed there
    '{"time":"2025-10-31T21:06:45.397194Z","level":"DEBUG","file":"/opt/dynamo/lib/runtime/src/pipeline/network/tcp/server.rs","line":230,"target":"dynamo_runtime::pipeline::network::tcp::server","message":"Registering new TcpStream on 10.0.4.65:41959","method":"POST","span_id":"f7e487a9d2a6bf38","span_name":"http-request","trace_id":"80196f3e3a6fdf06d23bb9ada3788518","uri":"/v1/chat/completions","version":"HTTP/1.1","x_request_id":"8372eac7-5f43-4d76-beca-0a94cfb311d0"}',
    '{"time":"2025-10-31T21:06:45.418584Z","level":"DEBUG","file":"/opt/dynamo/lib/llm/src/kv_router/prefill_router.rs","line":232,"target":"dynamo_llm::kv_router::prefill_router","message":"Prefill succeeded, using disaggregated params for decode","method":"POST","span_id":"f7e487a9d2a6bf38","span_name":"http-request","trace_id":"80196f3e3a6fdf06d23bb9ada3788518","uri":"/v1/chat/completions","version":"HTTP/1.1","x_request_id":"8372eac7-5f43-4d76-beca-0a94cfb311d0"}',
    '{"time":"2025-10-31T20:52:07.707164Z","level":"INFO","file":"/opt/dynamo/lib/runtime/src/logging.rs","line":806,"target":"dynamo_runtime::logging","message":"OpenTelemetry OTLP export enabled","endpoint":"http://tempo.tm.svc.cluster.local:4317","service":"frontend"}',
)  # fmt: skip


def test_dynamo_jsonl(tmp_path: Path, db: Path) -> None:
    """Dynamo's JSONL: times and levels from their keys, the message its readable line,
    every key kept in fields, x_request_id and trace_id as named values; a request's
    error is an event naming its rid; a line that is no JSON is quarantined alone."""
    error = orjson.loads(DYNAMO_DOCS[1]) | {  # the docs' line at ERROR (hand-edited)
        "level": "ERROR", "target": "dynamo_llm::http::service",
        "message": "request completed with internal error status=500"}  # fmt: skip
    path = tmp_path / "frontend.jsonl"
    path.write_text("\n".join([*DYNAMO_DOCS, orjson.dumps(error).decode(), "{not json"]) + "\n")
    res = forensics.ingest([str(path)], db)
    src = res.sources[0]
    assert src.format == "dynamo-jsonl" and src.quarantined == 1 and src.entries == 4
    rows = _entries(db)
    assert rows[0][0] == 1_761_944_805_397_194 and {r[1] for r in rows} == {"frontend"}
    assert rows[0][4].startswith("2025-10-31T21:06:45.397194Z DEBUG http-request{method=POST ")
    assert rows[0][4].endswith("}: dynamo_runtime::pipeline::network::tcp::server: "
                               "Registering new TcpStream on 10.0.4.65:41959")  # fmt: skip
    assert orjson.loads(rows[0][5])["line"] == 230  # the source location: fields only
    got = forensics.query_rows(
        "SELECT level, component, named['x_request_id'], named['trace_id'] FROM lines"
        " ORDER BY entry_no", db)[1]  # fmt: skip
    assert [g[0] for g in got] == ["debug", "debug", "info", "error"]
    assert {g[1] for g in got} == {"dynamo"}
    assert got[0][2:] == (
        "8372eac7-5f43-4d76-beca-0a94cfb311d0",
        "80196f3e3a6fdf06d23bb9ada3788518",
    )
    events = forensics.query_rows("SELECT kind, rid, status FROM events", db)[1]
    assert events == [("dynamo_error", "8372eac7-5f43-4d76-beca-0a94cfb311d0", 500)]
