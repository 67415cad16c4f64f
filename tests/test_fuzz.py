"""Fuzz: no input aborts an ingest. Random bytes, random `key: value` stats lines, random
json values through every reader and pattern; every line ends up stored or quarantined."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import polars as pl
from forensics.parsers.formats import read_stream
from forensics.parsers.journald import ReadContext, read_entries
from forensics.parsers.patterns import apply, builtin, meta_info
from forensics.parsers.plain import PLAIN_FORMATS
from forensics.parsers.records import parse_records
from forensics.parsers.results import read_results
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import forensics

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
READERS = ["short-iso-precise", "short", "short-unix", "cat", "json", "export"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = ["MESSAGE", "_HOSTNAME", "__CURSOR", "__REALTIME_TIMESTAMP", "_PID", "PRIORITY",
          "SYSLOG_IDENTIFIER", "_BOOT_ID", "_LINE_BREAK", "OTHER"]  # fmt: skip


def _drain(tables) -> int:
    return sum(t.num_rows for t in tables)


@FUZZ
@given(data=st.binary(max_size=2000), fmt=st.sampled_from(READERS + list(PLAIN_FORMATS)))
def test_random_bytes_never_abort_a_reader(data: bytes, fmt: str) -> None:
    ctx = ReadContext(name="fuzz.log")
    n = _drain(read_stream(io.BytesIO(data), fmt, ctx))
    # Each entry and each quarantined line starts on a line of its own.
    assert n + len(ctx.quarantine) <= max(ctx.lines, 1)


@FUZZ
@given(objs=st.lists(st.dictionaries(st.sampled_from(FIELDS), json_values), max_size=6))
def test_random_json_values_are_stored_or_quarantined(objs: list[dict]) -> None:
    lines = [orjson.dumps(o, option=orjson.OPT_NON_STR_KEYS) for o in objs if _encodable(o)]
    ctx = ReadContext(name="fuzz.json")
    n = _drain(read_entries(io.BytesIO(b"\n".join(lines) + b"\n"), "json", ctx))
    assert n + len(ctx.quarantine) == len(lines)


def _encodable(o: object) -> bool:
    try:
        orjson.dumps(o)
    except TypeError:
        return False
    return True


keys = st.text(alphabet="#abcdefgh -_()/.%", min_size=1, max_size=14)
values = st.text(alphabet="0123456789.%TrueFals-e", max_size=10) | st.text(max_size=6)
stats = st.lists(st.tuples(keys, values), max_size=10).map(
    lambda kv: ", ".join(f"{k}: {v}" for k, v in kv)
)


@FUZZ
@given(
    head=st.sampled_from(["Prefill batch, ", "Decode batch [7], ", "new fill batch. ", ""]),
    body=stats,
)
def test_random_stats_lines_through_every_pattern(head: str, body: str) -> None:
    line = f"[2026-09-20 14:03:12 TP0] {head}#running-req: 1, #token: 2, {body}"
    found = apply(builtin(), pl.Series([line, body, head], dtype=pl.String))
    assert all(df["row"].max() < 3 for df in found.values() if len(df))


@FUZZ
@given(body=st.text(max_size=80), kind=st.sampled_from(["checksum", "canary", "step", "x"]))
def test_random_record_bodies_are_records_or_rejects(body: str, kind: str) -> None:
    msg = f"forensics:{kind} {body}"
    recs = parse_records(pl.DataFrame({"message": [msg], "fields": [None]}, schema={
        "message": pl.String, "fields": pl.String}))  # fmt: skip
    stored = len(recs.checksum) + len(recs.canary) + len(recs.step)
    assert stored + len(recs.rejects) == 1


@FUZZ
@given(objs=st.lists(st.dictionaries(
    st.sampled_from(["session", "rid", "corrupted", "ok", "start", "end", "round", "room"]),
    json_values), max_size=5))  # fmt: skip
def test_random_results_rows(objs: list[dict]) -> None:
    lines = [orjson.dumps(o) for o in objs if _encodable(o)]
    ctx = ReadContext(name="r.jsonl")
    table = read_results(io.BytesIO(b"\n".join(lines)), "results-jsonl", ctx)
    assert table.num_rows + len(ctx.quarantine) == len(lines)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=3000))
def test_random_files_never_abort_an_ingest(data: bytes, tmp_path_factory) -> None:
    d = tmp_path_factory.mktemp("fuzz")
    path = d / "in.log"
    # Prefixed so that sniffing picks a reader rather than refusing binary input.
    path.write_bytes(b"[2026-09-20 14:03:12 TP0] x\n" + data.replace(b"\x00", b"."))
    res = forensics.ingest([str(path)], Path(d) / "f.duckdb")
    assert res.sources[0].status == "ingested"


@FUZZ
@given(objs=st.lists(st.dictionaries(
    st.sampled_from(["request_parameters", "id", "finish_reason", "prompt_tokens",
                     "response_sent_to_client_ts", "e2e_latency", "num_retractions"]),
    json_values), max_size=5), cut=st.integers(0, 400))  # fmt: skip
def test_random_metrics_records_are_stored_or_quarantined(objs: list[dict], cut: int) -> None:
    # --export-metrics-to-file records with any values, one of them cut short
    lines = [orjson.dumps(o) for o in objs if _encodable(o)]
    if lines:
        lines[-1] = lines[-1][:cut] or b"{"
    ctx = ReadContext(name="sglang-request-metrics-20260920_14.log")
    tables = list(read_stream(io.BytesIO(b"\n".join(lines) + b"\n"), "sglang-metrics", ctx))
    n = sum(t.num_rows for t in tables)
    assert n + len(ctx.quarantine) == sum(1 for ln in lines if ln.strip())
    if n:  # and what was stored goes through every pattern without raising
        msgs = pl.concat([pl.from_arrow(t.column("message")) for t in tables]).cast(pl.String)
        apply(builtin(), msgs)


@FUZZ
@given(rid=st.text(max_size=30), message=st.text(max_size=40), as_json=st.booleans())
def test_meta_info_with_any_strings_reads_back_exactly(rid: str, message: str,
                                                        as_json: bool) -> None:  # fmt: skip
    # reprs and JSON with nested quotes, braces, escapes and newlines in their strings
    meta = {"id": rid, "finish_reason": {"type": "abort", "message": message}, "dp_rank": 1}
    text = orjson.dumps(meta).decode() if as_json else repr(meta)
    key = '"meta_info"' if as_json else "'meta_info'"
    line = f"Finish: obj=GenerateReqInput(rid='…' ...), out={{{key}: {text}, 'x': 1}}"
    r = meta_info.row(line)
    assert (r["rid"], r["finish_message"], r["dp_rank"]) == (rid, message, "1")


def test_scheduler_status_with_100k_rids_and_cut_short(tmp_path: Path) -> None:
    rids = [f"{i:032x}" for i in range(100_000)]
    status = orjson.dumps({"timestamp": "2026-09-20T14:03:14.5", "event": "scheduler.status",
                           "running_rids": rids, "queued_rids": rids[:10]}).decode()  # fmt: skip
    status = status.replace('":', '": ').replace('",', '", ')  # json.dumps' separators
    log = tmp_path / "decode-0.log"
    log.write_text(f"[2026-09-20 14:03:14] {status}\n"
                   f"[2026-09-20 14:03:15] {status[:5000]}\n")  # fmt: skip
    db = tmp_path / "f.duckdb"
    res = forensics.ingest([str(log)], db)
    assert (res.sources[0].entries, res.sources[0].quarantined) == (2, 0)
    _, rows = forensics.query_rows(
        "SELECT json_array_length(running_rids), json_array_length(queued_rids) "
        "FROM scheduler_status", db)  # fmt: skip
    assert rows == [(100_000, 10)]  # the cut line is an entry, and no row
