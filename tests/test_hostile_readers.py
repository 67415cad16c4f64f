"""The readers against hostile and broken producers (issue 66): each case stored or
quarantined with its reason, bounded in time and memory, the rest of its folder stored,
no secret of the listed kinds in a bundle, no time before 2000. The hostile pickles and
documents are built here; nothing large is committed."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest
from forensics.parsers import flight_recorder as fr

import forensics
from forensics.scrubbing import scrub
from tests.helpers import cli

DATA = Path(__file__).parent / "data"
T0_NS = 1_780_000_000_000_000_000  # 2026-05-28T20:26:40Z
GOOD_LOG = "".join(
    f"[2026-05-28 20:27:{i:02d}] Decode batch. #running-req: {i}\n" for i in range(30)
)


def _q(db: Path, sql: str) -> list[tuple]:
    return forensics.query_rows(sql, db)[1]


def _dump(entry: dict) -> dict:
    return {"version": "2.4", "pg_config": {}, "pg_status": {}, "entries": [entry]}


def _entry(**values: object) -> dict:
    return {"record_id": 1, "pg_id": 0, "collective_seq_id": 1, "state": "completed",
            "profiling_name": "nccl:all_reduce", "time_created_ns": T0_NS, **values}  # fmt: skip


def _deep_pickle(levels: int) -> bytes:
    """A dump whose profiling_name is a list `levels` deep, as pickle opcodes (pickling
    one that deep needs Python's recursion): the marker string swapped for the lists."""
    marker = "DEEP-MARKER"
    data = pickle.dumps(_dump(_entry(profiling_name=marker)), 2)
    op = b"X" + struct.pack("<I", len(marker)) + marker.encode()
    return data.replace(op, b"]" * levels + b"a" * (levels - 1))


def test_flight_recorder_values_no_reader_could_format_cost_only_themselves(tmp_path: Path) -> None:
    """A memoised list 80 levels deep (2⁸⁰ leaves, hung for good), an int past 4,300
    digits (ValueError: nothing of the folder stored), a list 100,000 deep (RecursionError),
    10⁵ references to one 10⁵-digit string, a boolean time: each dump stored with its value
    cut short and a note, the good log beside them stored too."""
    x: list = []
    for _ in range(80):
        x = [x, x]
    big = "7" * 100_000
    dumps = {
        "nccl_trace_rank_0": pickle.dumps(_dump(_entry(profiling_name=x)), 2),
        "nccl_trace_rank_1": pickle.dumps(
            _dump(_entry(input_sizes=[[10**5000]], profiling_name="x" * 1000)), 2
        ),
        "nccl_trace_rank_2": _deep_pickle(100_000),
        "nccl_trace_rank_3": pickle.dumps(_dump(_entry(input_sizes=[[big]] * 100_000)), 2),
        "nccl_trace_rank_4": pickle.dumps(_dump(_entry(time_created_ns=True)), 2) + b"junk",
    }
    for name, data in dumps.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "decode-1.log").write_text(GOOD_LOG)
    db = tmp_path / "f.duckdb"
    out = cli("ingest", str(tmp_path), "--db", str(db))
    assert out.returncode == 0, out.stderr
    got = dict(_q(db, "SELECT regexp_extract(path, '[^/]+$'), entries FROM sources"))
    assert got == {"decode-1.log": 30, **dict.fromkeys(dumps, 1)}
    ops = dict(_q(db, "SELECT rank, op FROM collectives WHERE state <> 'group'"))
    assert ops[0].startswith("[" * (fr.MAX_DEPTH + 1) + fr.DEEP) and fr.DEEP in ops[2]
    assert ops[1] == "x" * fr.VALUE_CHARS + "…"
    assert _q(db, "SELECT ts_us FROM collectives WHERE rank = 4 AND state <> 'group'") == [(None,)]
    assert _q(db, "SELECT min(ts_us) FROM entries")[0][0] >= 946_684_800_000_000
    notes = dict(_q(db, "SELECT regexp_extract(path, '[^/]+$'), notes FROM sources"))
    assert any("kept cut short" in n for n in notes["nccl_trace_rank_0"])
    assert "4 bytes after the dump's end, not read" in notes["nccl_trace_rank_4"]
    assert any("without a readable time_created_ns" in n for n in notes["nccl_trace_rank_4"])


def test_a_json_lines_log_naming_entries_and_pg_config_is_a_log(tmp_path: Path) -> None:
    """A first record with `entries` and `pg_config` keys, then 1,000 more: a JSON-lines
    log of 1,001 entries (it was one Flight Recorder dump, every line lost); torch's own
    JSON dump is still a dump."""
    recs = [{"time": "2026-05-28T20:27:00Z", "msg": "fr armed", "entries": [], "pg_config": {}}]
    recs += [{"time": f"2026-05-28T20:27:{i % 60:02d}Z", "msg": f"hello {i}"} for i in range(1000)]
    (tmp_path / "app.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    db = tmp_path / "j.duckdb"
    forensics.ingest([str(tmp_path / "app.jsonl")], db)
    assert _q(db, "SELECT format, entries, quarantined FROM sources") == [("json-log", 1001, 0)]
    head = (DATA / "flight-recorder" / "fr_trace_rank_0.json").read_bytes()
    assert fr.sniff(head) == "flight-recorder"
    assert fr.sniff(orjson.dumps(recs[0]) + b"\n" + orjson.dumps(recs[1])) is None


def test_otlp_documents_one_after_another_are_each_read(tmp_path: Path) -> None:
    """The spec's pretty-printed example twice, and `jq .` of a collector's lines: every
    span read (it was an OutOfBoundsError, or one quarantined line for the file)."""
    doc = (DATA / "otlp" / "trace.json").read_text()
    (tmp_path / "twice.json").write_text(doc + doc)
    lines = (DATA / "otlp" / "sglang-pd.jsonl").read_text().splitlines()[:6]
    pretty = "".join(json.dumps(json.loads(x), indent=2) + "\n" for x in lines)
    (tmp_path / "jq.json").write_text(pretty)
    db = tmp_path / "o.duckdb"
    forensics.ingest([str(tmp_path / "twice.json")], db, host="h")
    one = tmp_path / "one.duckdb"
    forensics.ingest([str(DATA / "otlp" / "trace.json")], one, host="h")
    (n_one,) = _q(one, "SELECT count(*) FROM spans")[0]
    assert n_one > 0 and _q(db, "SELECT count(*), count(DISTINCT line_first) FROM spans "
                                "JOIN entries USING (source_id, entry_no)") == [(2 * n_one, 2)]  # fmt: skip
    jq = tmp_path / "q.duckdb"
    forensics.ingest([str(tmp_path / "jq.json")], jq)
    flat = tmp_path / "f.duckdb"
    forensics.ingest([str(tmp_path / "jq.json").replace("jq.json", "flat.jsonl")]
                     if (tmp_path / "flat.jsonl").write_text("\n".join(lines) + "\n") else [], flat)  # fmt: skip
    assert _q(jq, "SELECT count(*) FROM spans") == _q(flat, "SELECT count(*) FROM spans")


def _span(**over: object) -> dict:
    return {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "00000000000000a1",
            "name": "s", "startTimeUnixNano": str(T0_NS),
            "endTimeUnixNano": str(T0_NS + 10**9), **over}  # fmt: skip


def _request(spans: list[dict], attrs: list | None = None) -> bytes:
    res = {"attributes": [{"key": "host.name", "value": {"stringValue": "frontend-0"}}]}
    return json.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [
        {"spans": [{**s, "attributes": attrs or []} for s in spans]}]}]}).encode()  # fmt: skip


def test_otlp_times_ids_and_nesting(tmp_path: Path) -> None:
    """A start of 0, a negative one, one before 2000: quarantined as no readable start; an
    end before its start and an id of the wrong length kept with a counted note; an
    attribute 100 arrays and maps deep (26 took 2.6–4.4 GB and a SIGSEGV before: each
    level's text escaped into the next) kept as its JSON, each level once, cut at 64."""
    nested: dict = {"stringValue": 'a "quoted" leaf'}
    for level in range(100):
        nested = {"kvlistValue": {"values": [{"key": "k", "value": nested}]}} if level % 2 else {
            "arrayValue": {"values": [nested]}}  # fmt: skip
    spans = [_span(startTimeUnixNano="0"), _span(startTimeUnixNano="-5"),
             _span(startTimeUnixNano=str(10**17)), _span(endTimeUnixNano=str(T0_NS - 1)),
             _span(spanId="00a1"), _span(name="deep")]  # fmt: skip
    attrs = [{"key": "deep", "value": nested}]
    (tmp_path / "t.jsonl").write_bytes(_request(spans, attrs) + b"\n")
    db = tmp_path / "t.duckdb"
    forensics.ingest([str(tmp_path / "t.jsonl")], db)
    reasons = [r for (r,) in _q(db, "SELECT reason FROM quarantine ORDER BY 1")]
    assert len(reasons) == 3 and all("no readable start" in r for r in reasons)
    assert _q(db, "SELECT count(*), min(ts_us) >= 946684800000000 FROM spans") == [(3, True)]
    (notes,) = _q(db, "SELECT notes FROM sources")[0]
    assert "1 × spans that end before they start (kept)" in notes
    assert any(n.startswith("1 × spans with an id of the wrong length") for n in notes)
    (deep,) = _q(db, "SELECT attributes['deep'] FROM spans WHERE name = 'deep'")[0]
    assert deep.startswith('{"k":[{"k":[') and len(deep) < 400  # each level once, 64 kept
    assert deep.count("[") == 32 and '"<past 64 levels>"' in deep


def test_a_damaged_length_prefix_does_not_lose_the_requests_after_it(tmp_path: Path) -> None:
    """Three length-prefixed requests, the second's prefix 4 GB: it is quarantined with
    its offset, and the third is read (it was lost with everything after it)."""
    pytest.importorskip("opentelemetry.proto", reason="the otel extra reads protobuf")
    framed = (DATA / "otlp" / "trace.pb").read_bytes()
    (n,) = struct.unpack(">I", framed[:4])
    one = framed[: 4 + n]
    bad = b"\xff\xff\xff\xf0" + one[4:]
    (tmp_path / "t.pb").write_bytes(one + bad + one)
    db = tmp_path / "p.duckdb"
    forensics.ingest([str(tmp_path / "t.pb")], db, host="h")
    ok = tmp_path / "ok.duckdb"
    forensics.ingest([str(DATA / "otlp" / "trace-bare.pb")], ok, host="h")
    (per,) = _q(ok, "SELECT count(*) FROM spans")[0]
    assert _q(db, "SELECT count(*) FROM spans") == [(2 * per,)]
    (reason,) = _q(db, "SELECT reason FROM quarantine")[0]
    assert "past the end" in reason and f"read on from byte {2 * len(one):,}" in reason


def test_dynamo_records_deep_wide_and_untimed(tmp_path: Path) -> None:
    """A record 600 arrays deep (3 GB before), one of 10⁵ keys (past 300 s), and times that
    are none (negative, 1e30, "abc"): every line an entry, each but the deep one a
    request_traces row (its fields are past the JSON reader's depth), the untimed ones
    counted and given the time before them."""
    base = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
            "event_time_unix_ms": 1_780_000_000_000, "request": {"request_id": "r1"}}  # fmt: skip
    deep = b'{"schema":"dynamo.request.trace.v1","event_type":"request_end",' \
           b'"event_time_unix_ms":1780000000000,"request":{"request_id":"r2","model":' + \
           b"[" * 600 + b"]" * 600 + b"}}"  # fmt: skip
    wide = {**base, "request": {"request_id": "r3", **{f"k{i}": i for i in range(100_000)}}}
    odd = [{**base, "event_time_unix_ms": t} for t in (-5, 1e30, "abc")]
    recs = [orjson.dumps(base), deep, orjson.dumps(wide), *map(orjson.dumps, odd)]
    (tmp_path / "dynamo-request-trace.000001.jsonl").write_bytes(b"\n".join(recs) + b"\n")
    db = tmp_path / "d.duckdb"
    forensics.ingest([str(tmp_path)], db)
    assert _q(db, "SELECT count(*), count(*) FILTER (ts_inherited) FROM entries") == [(6, 3)]
    assert _q(db, "SELECT string_agg(DISTINCT rid, ',' ORDER BY rid) FROM request_traces") == [
        ("r1,r3",)
    ]
    (notes,) = _q(db, "SELECT notes FROM sources")[0]
    assert "3 × records whose event_time_unix_ms is no time (stored untimed)" in notes


def test_a_nul_inside_a_line_costs_that_line_and_a_damaged_archive_that_file(
    tmp_path: Path,
) -> None:
    """One NUL inside a line near the head (the file was refused whole): that line
    quarantined, the rest read. A damaged archive and one with junk after it, found in a
    folder: skipped with the reason, the good log stored; named alone, one line, exit 2."""
    text = GOOD_LOG.replace("#running-req: 3", "#running\x00-req: 3")
    (tmp_path / "decode-1.log").write_text(text)
    arch = gzip.compress(GOOD_LOG.encode() * 50)
    flipped = bytearray(arch)
    flipped[len(arch) // 2 : len(arch) // 2 + 40] = bytes(
        b ^ 0xFF for b in flipped[len(arch) // 2 : len(arch) // 2 + 40]
    )
    (tmp_path / "p1.log.gz").write_bytes(bytes(flipped))
    (tmp_path / "p2.log.gz").write_bytes(arch + b"junk after it\n")
    db = tmp_path / "n.duckdb"
    out = cli("ingest", str(tmp_path), "--db", str(db), text=True)
    assert out.returncode == 0, out.stderr
    assert "skipped " + str(tmp_path / "p1.log.gz") + ": corrupt .gz archive" in out.stdout
    assert "skipped " + str(tmp_path / "p2.log.gz") + ": corrupt .gz archive" in out.stdout
    assert _q(db, "SELECT entries, quarantined FROM sources") == [(29, 1)]
    assert _q(db, "SELECT line, reason FROM quarantine") == [
        (4, "a NUL byte inside the line (a write cut short?)")
    ]
    alone = cli("ingest", str(tmp_path / "p1.log.gz"), "--db", str(tmp_path / "x.duckdb"),
                text=True)  # fmt: skip
    assert alone.returncode == 2 and len(alone.stderr.splitlines()) == 1


@pytest.mark.parametrize("text", ["-", "://", "--a", "=", ":", "token_", "secret", "--secret"])
def test_the_scrub_is_linear_on_long_runs(text: str) -> None:
    """64 KiB lines of each run (one of `-` took 128 s, `--a` 44 s, `://` 9 s): RE2 reads
    each in one pass. The bound is generous (bench/scrub.py measures: ~0.003 s each)."""
    import time

    line = text * (65536 // len(text))
    start = time.perf_counter()
    assert scrub(line) == line
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    ("text", "kept"),
    [("password_db=hunter2x", "password_db=***"), ("passwd_file=/etc/pw", "passwd_file=***"),
     ("token_db=abcd", "token_db=***"), ("Cookie: sid=abc", "Cookie: ***"),
     ("set-cookie: sid=abc", "set-cookie: ***"), ("x-api-key: abc123", "x-api-key: ***"),
     ("max_new_tokens=abc", "max_new_tokens=abc"), ("#new-token: 896", "#new-token: 896"),
     ('{"key":"db.password","value":{"stringValue":"hunter2"}}',
      '{"key":"db.password","value":{"stringValue":"***"}}'),
     ('{"key":"http.request.header.authorization","value":["Bearer abc"]}',
      '{"key":"http.request.header.authorization","value":["***"]}')],
)  # fmt: skip
def test_secret_names_anywhere_and_json_keys_apart(text: str, kept: str) -> None:
    assert scrub(text) == kept


def test_captured_credential_headers_leave_no_bundle_member(tmp_path: Path) -> None:
    """OpenTelemetry's captured headers (`http.request.header.authorization` = a list of
    its values, cookie, x-api-key, in any case) and a JSON input's `db.password` under
    `--with-inputs`: none reaches the bundle (spans.parquet and the input kept it)."""
    from tests.test_bundle import _found, _members

    secrets = ["AuthSecret-101", "CookieSecret-202", "KeySecret-303", "DbSecret-404"]
    arr = {"arrayValue": {"values": [{"stringValue": f"Bearer {secrets[0]}"}]}}
    attrs = [{"key": "http.request.header.authorization", "value": arr},
             {"key": "HTTP.Request.Header.Cookie", "value": {"stringValue": secrets[1]}},
             {"key": "http.request.header.x-api-key", "value": {"stringValue": secrets[2]}},
             {"key": "db.password", "value": {"stringValue": secrets[3]}}]  # fmt: skip
    (tmp_path / "t.jsonl").write_bytes(_request([_span()], attrs) + b"\n")
    db = tmp_path / "s.duckdb"
    forensics.ingest([str(tmp_path / "t.jsonl")], db)
    for inputs in (False, True):
        out = tmp_path / f"b{inputs}.tar.zst"
        forensics.bundle(db, out, with_inputs=inputs)
        m = _members(out)
        spans = pq.read_table(io.BytesIO(m["tables/spans.parquet"])).to_pylist()
        assert len(spans) == 1
        for secret in secrets:
            assert _found(m, secret) == [], (inputs, secret)


@pytest.mark.slow
def test_bombs_and_huge_lines_stay_under_the_memory_bound(tmp_path: Path) -> None:
    """1 GB of zeros as gzip (2.2 GB before) and as zstd, 1 GB of one letter with no
    newline, and one
    OTLP line of 200 MB (2.96 GB before): each ingest's peak ≤ 1.5 GB, the long lines
    quarantined with their size, the good log beside them stored."""
    import zlib

    def gz(path: Path, block: bytes, times: int) -> None:
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        with path.open("wb") as f:
            for _ in range(times):
                f.write(c.compress(block))
            f.write(c.flush())

    gz(tmp_path / "zeros.log.gz", bytes(1 << 24), 64)
    import zstandard

    with (tmp_path / "zeros.log.zst").open("wb") as f:  # 1 GB in ~32 KB
        z = zstandard.ZstdCompressor(level=3).compressobj()
        f.writelines(z.compress(bytes(1 << 24)) for _ in range(64))
        f.write(z.flush())
    gz(tmp_path / "letters.log.gz", b"a" * (1 << 24), 64)
    span = _request([_span()])
    with (tmp_path / "t.jsonl").open("wb") as f:
        f.write(span[:-1] + b',"pad":"' + b"x" * (200 << 20) + b'"}\n' + span + b"\n")
    (tmp_path / "decode-1.log").write_text(GOOD_LOG)
    probe = ("import resource, sys, forensics; forensics.ingest(sys.argv[1:-1], sys.argv[-1]); "
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")  # fmt: skip
    db = tmp_path / "m.duckdb"
    for name in ("zeros.log.gz", "zeros.log.zst", "letters.log.gz", "t.jsonl", "decode-1.log"):
        run = subprocess.run([sys.executable, "-c", probe, str(tmp_path / name), str(db)],
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert run.returncode == 0 or "NUL bytes and nothing else" in run.stderr, run.stderr
        assert int(run.stdout.split()[-1] if run.stdout else 0) < 1_500_000, name  # kB
    reasons = [r for (r,) in _q(db, "SELECT reason FROM quarantine ORDER BY 1")]
    assert len(reasons) == 2 and all(" MB one record may hold" in r or " MB one line may hold" in r
                                     for r in reasons)  # fmt: skip
    assert _q(db, "SELECT count(*) FROM spans") == [(1,)]


def test_two_replicas_idle_logs_are_not_one_journal_by_content_alone(tmp_path: Path) -> None:
    """Two pods' idle logs under one file name (a /health line and a batch line a second,
    identical): plain logs with whole-second times and no pid look like one journal, and
    were merged (1,206 entries → 606). Both kept, the note says why and how to merge;
    `sources dedupe` still merges them when asked."""
    lines = [
        f"[2026-05-28 20:{27 + i // 60}:{i % 60:02d}] INFO:     10.0.0.1:5000 - \"GET /health "
        f"HTTP/1.1\" 200 OK\n[2026-05-28 20:{27 + i // 60}:{i % 60:02d}] Decode batch. "
        "#running-req: 0, #token: 0, token usage: 0.00\n"
        for i in range(303)
    ]  # fmt: skip
    for pod, seconds in (("pod-a", 303), ("pod-b", 300)):  # one started 3 s later
        (tmp_path / pod).mkdir()
        (tmp_path / pod / "sglang.log").write_text("".join(lines[-seconds:]))
    db = tmp_path / "r.duckdb"
    for pod in ("pod-a", "pod-b"):
        forensics.ingest([str(tmp_path / pod / "sglang.log")], db)
    assert _q(db, "SELECT sum(entries), sum(duplicates) FROM sources") == [(1206, 0)]
    (notes,) = _q(db, "SELECT notes FROM sources WHERE source_id = 2")[0]
    said = [n for n in notes if "cannot be told from two replicas' logs" in n]
    assert said and "`forensics sources dedupe 2 --against 1` merges them" in said[0], notes
    out = cli("sources", "dedupe", "2", "--against", "1", "--db", str(db), text=True)
    assert out.returncode == 0, out.stderr
    assert _q(db, "SELECT count(*) FROM entries") == [(606,)]
