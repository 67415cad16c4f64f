"""`forensics bundle`: each part opened and checked; every member searched, decompressed
and unescaped, for the secrets (never there) and for 32-character pieces of each prompt
(gone under --redact-prompts, there without it)."""

from __future__ import annotations

import html
import io
import re
import tarfile
from pathlib import Path

import duckdb
import orjson
import pyarrow.parquet as pq
import pytest
import zstandard
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import forensics
from forensics.artifacts.bundle import bundle
from forensics.scope import open_scope
from forensics.scrubbing import scrub, sql_scrub
from forensics.store import connect_read_only
from tests.helpers import cli

PROMPTS = [
    "Summarise the quarterly revenue table for the finance team and flag outliers please",
    "Write a bash script that rotates the nginx logs every night and keeps seven copies",
]
SECRETS = ["hunter2-Pa55word", "sk-live-abcdefghijklmnopqrstu", "eyJhbGciOiJIUzI1NiJ9.tok3n",
           "AKIAsecretkey12345",
           # issue 31: a run tag's URL, a token-named tag, a results header's URL whose
           # password holds @ and /, user-less credentials, token-like keys in ServerArgs,
           # a query string and JSON, value-shaped secrets whatever their key
           "TagPass-111", "TagTok-222", "SS/word-333", "Less-444", "Kf-555", "Q-666",
           "Aws-777", "hf_abcdefghijklmnopqrstuvwxyz0123", "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
           "AKIAIOSFODNN7EXAMPLE", "MIIEowIBAAKCAQEA2a2rwplBQLzHPZe5",
           "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"]  # fmt: skip


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bundle")
    forensics.demo(d)
    log = d / "decode-9.log"
    lines = [
        f"[2026-11-29 07:00:0{i} TP0] Receive: obj=GenerateReqInput(rid='x{i}', "
        f"text='{p}', bootstrap_room={900 + i})"
        for i, p in enumerate(PROMPTS)
    ]
    lines += [
        "[2026-11-29 07:00:05 TP0] connecting to http://admin:hunter2-Pa55word@10.0.4.11:8998/",
        "[2026-11-29 07:00:06 TP0] headers: {'Authorization': 'Bearer eyJhbGciOiJIUzI1NiJ9.tok3n'}",
        f"[2026-11-29 07:00:07 TP0] server_args=ServerArgs(model_path='m', api_key='{SECRETS[3]}')",
        "[2026-11-29 07:00:08 TP0] cache at redis://:Less-444@cache:6379/0",
        "[2026-11-29 07:00:08 TP0] server_args=ServerArgs(hf_token='hf_abcdefghijklmnopqrstuvwxyz0123', "
        "ssl_keyfile_password='Kf-555', tokenizer_path='m', max_total_tokens=8192)",
        '[2026-11-29 07:00:09 TP0] GET /v1/models?token=Q-666&x=1 {"aws_secret_access_key": "Aws-777"}',
        "[2026-11-29 07:00:09 TP0] pushing with ghp_0123456789abcdefghijklmnopqrstuvwxyz as AKIAIOSFODNN7EXAMPLE",
        "[2026-11-29 07:00:09 TP0] key -----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA2a2rwplBQLzHPZe5 "
        "-----END RSA PRIVATE KEY----- loaded",
        "[2026-11-29 07:00:09 TP0] session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
        # a prompt inside an unquoted error line: the masker leaves it in the template
        f"[2026-11-29 07:00:09 TP0] ERROR: could not parse the tool call in: {PROMPTS[1]}",
        # a template and a named value that are evidence, not user text
        "[2026-11-29 07:00:09 TP0] createXferReq: metadata for remote agent 'decode-7' not found",
    ]  # fmt: skip
    log.write_text("\n".join(lines) + "\n")
    results = d / "extra-results.jsonl"
    rows = [
        {
            "forensics_run": "extra",
            "server_info": {
                "version": "0.5.9",
                "api_key": SECRETS[1],
                "tp_size": 2,
                "url": "postgres://u:P@SS/word-333@db:5432/x",
            },
        }
    ]
    rows += [{"session": str(i), "round": 0, "rid": f"x{i}", "corrupted": True,
              "reason": f"reply echoed the prompt: {p}", "prompt": p}
             for i, p in enumerate(PROMPTS)]  # fmt: skip
    results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    forensics.ingest([str(log), str(results)], d / "forensics.duckdb", run="extra",
                     tags={"url": "http://u:TagPass-111@h", "hf_token": "TagTok-222"})  # fmt: skip
    return d


def _members(path: Path) -> dict[str, bytes]:
    with open(path, "rb") as fh:
        data = zstandard.ZstdDecompressor().stream_reader(fh).read()
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return {m.name.removeprefix("incident/"): t.extractfile(m).read() for m in t.getmembers()}


def _texts(name: str, data: bytes) -> list[str]:
    """What a reader of the member could see: its text, HTML- and JSON-unescaped; a
    Parquet file's every value."""
    if name.endswith(".parquet"):
        return [str(pq.read_table(io.BytesIO(data)).to_pylist())]
    text = data.decode("utf-8", "replace")
    out = [text, html.unescape(text)]
    for t in list(out):  # JSON's escapes, as a JSON string in a page or a file holds them
        out.append(re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), t)
                   .replace('\\"', '"').replace("\\/", "/").replace("\\\\", "\\"))  # fmt: skip
    return out


def _pieces(text: str) -> list[str]:
    return [text[i : i + 32] for i in range(0, len(text) - 31, 8)]


def _found(members: dict[str, bytes], needle: str) -> list[str]:
    return [n for n, d in members.items() if any(needle in t for t in _texts(n, d))]


def test_bundle_parts_open_and_say_what_they_are(incident: Path, tmp_path: Path) -> None:
    res = bundle(incident / "forensics.duckdb", tmp_path / "b.tar.zst")
    m = _members(tmp_path / "b.tar.zst")
    assert set(res.members) == set(m)
    for part in ("report.txt", "report.json", "suspects.txt", "suspects.json", "dashboard.html",
                 "incident.pftrace", "sources.json", "runs.json", "versions.json"):  # fmt: skip
        assert part in m and part in m["README.txt"].decode()
    assert orjson.loads(m["report.json"])["conclusions"]

    def ints(doc):
        if isinstance(doc, dict):
            return [i for v in doc.values() for i in ints(v)]
        if isinstance(doc, list):
            return [i for v in doc for i in ints(v)]
        return [doc] if isinstance(doc, int) and not isinstance(doc, bool) else []

    assert all(abs(i) < 2**53 for i in ints(orjson.loads(m["report.json"])))  # rooms as text
    assert "inputs:" in m["report.txt"].decode()
    assert "ranked" in m["suspects.txt"].decode() or orjson.loads(m["suspects.json"])
    assert m["dashboard.html"].startswith(b"<!DOCTYPE html>") or b"<html" in m["dashboard.html"]
    packets = pb.Trace.FromString(m["incident.pftrace"]).packet
    assert packets[0].HasField("clock_snapshot") and len(packets) > 100
    sources = orjson.loads(m["sources.json"])
    _, rows = forensics.query_rows(
        "SELECT path, sha256 FROM sources", incident / "forensics.duckdb"
    )
    assert {(s["path"], s["sha256"]) for s in sources} == set(rows)
    versions = orjson.loads(m["versions.json"])
    assert versions["pd-forensics"] == forensics.__version__
    assert versions["dependencies"]["duckdb"] and versions["python"]
    assert versions["sglang"]["versions_in_runs"] == ["0.5.9"]
    assert any("ServerArgs(" in a for a in versions["sglang"]["server_args_lines"])
    runs = {r["run"]: r["tags"] for r in orjson.loads(m["runs.json"])}
    assert runs["extra"]["server.tp_size"] == "2"
    requests = pq.read_table(io.BytesIO(m["tables/requests.parquet"]))
    ((n,),) = forensics.query_rows("SELECT count(*) FROM requests", incident / "forensics.duckdb")[
        1
    ]
    assert requests.num_rows == n
    # every named view of queries/ is packed (failures, templates … were missing)
    from forensics.queries import names

    assert {f"tables/{v}.parquet" for v in names()} <= set(m)
    failures = pq.read_table(io.BytesIO(m["tables/failures.parquet"]))
    _, ((n,),) = forensics.query_rows(
        "SELECT count(*) FROM failures", incident / "forensics.duckdb"
    )
    assert failures.num_rows == n > 0
    # without redaction the prompts are there, so the search below can find them
    assert _found(m, PROMPTS[0][:32])
    assert not any(n.startswith("inputs/") for n in m)


@pytest.mark.parametrize(("redact", "inputs"), [(False, False), (True, False), (False, True)])
def test_no_secret_in_any_member(
    incident: Path, tmp_path: Path, redact: bool, inputs: bool
) -> None:
    bundle(incident / "forensics.duckdb", tmp_path / "b.tar.zst", redact_prompts=redact,
           with_inputs=inputs)  # fmt: skip
    m = _members(tmp_path / "b.tar.zst")
    for secret in SECRETS:
        assert _found(m, secret) == [], secret


def test_the_secrets_are_there_to_be_found(incident: Path, tmp_path: Path) -> None:
    """Without scrubbing, the dashboard and trace hold the secrets the bundle must not
    (so the searches above can fail); with --scrub they hold none."""
    db = str(incident / "forensics.duckdb")
    for flag in ([], ["--scrub"]):
        board, tr = tmp_path / f"d{len(flag)}.html", tmp_path / f"t{len(flag)}.json"
        r = cli("dashboard", "--db", db, "--out", str(board), *flag)
        assert r.returncode == 0, r.stderr
        r = cli("trace", "--db", db, "--out", str(tr), "--format", "json", *flag)
        assert r.returncode == 0, r.stderr
        m = {"dashboard.html": board.read_bytes(), "trace.json": tr.read_bytes()}
        found = [s for s in SECRETS if _found(m, s)]
        if flag:
            assert found == []
        else:  # the tag's URL is on the page; the log lines' secrets in the trace's args
            assert "TagPass-111" in found and len(found) >= 3, found


def test_bundle_is_private_and_packs_only_the_ingested_inputs(
    incident: Path, tmp_path: Path
) -> None:
    import shutil

    d = tmp_path / "copy"
    shutil.copytree(incident, d)
    (d / "forensics.duckdb").unlink()
    shutil.rmtree(d / "forensics.shards")
    log = d / "decode-9.log"
    forensics.ingest([str(log)], d / "x.duckdb")
    key = tmp_path / "id_rsa"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    log.unlink()
    log.symlink_to(key)  # the path now names another file: not the one ingested
    res = bundle(d / "x.duckdb", tmp_path / "p.tar.zst", with_inputs=True)
    assert (tmp_path / "p.tar.zst").stat().st_mode & 0o777 == 0o600
    m = _members(tmp_path / "p.tar.zst")
    assert not any(n.startswith("inputs/") for n in m)
    assert _found(m, "b3BlbnNzaC1rZXktdjEAAAAA") == []
    assert any("sha256" in n and "decode-9.log" in n for n in res.notes), res.notes
    with tarfile.open(fileobj=io.BytesIO(zstandard.ZstdDecompressor().stream_reader(
            open(tmp_path / "p.tar.zst", "rb")).read())) as t:  # fmt: skip
        assert {i.mode for i in t.getmembers()} == {0o600}


def test_redacted_bundle_holds_no_piece_of_any_prompt(incident: Path, tmp_path: Path) -> None:
    res = bundle(incident / "forensics.duckdb", tmp_path / "r.tar.zst", redact_prompts=True)
    assert res.key and len(res.key) == 32
    m = _members(tmp_path / "r.tar.zst")
    for prompt in PROMPTS:
        for piece in _pieces(prompt):
            assert _found(m, piece) == [], piece
    assert res.key not in b"".join(m.values()).decode("utf-8", "replace")  # not stored
    requests = pq.read_table(io.BytesIO(m["tables/requests.parquet"])).to_pylist()
    reasons = {r["rid"]: r["reason"] for r in requests if r["rid"] in ("x0", "x1")}
    assert all(v.startswith("hmac:") for v in reasons.values()) and len(set(reasons.values())) == 2
    assert "HMAC-SHA256" in m["README.txt"].decode()
    # the templates stay: they are the evidence (the one quoting a prompt goes)
    texts = {
        r["text"] for r in pq.read_table(io.BytesIO(m["tables/templates.parquet"])).to_pylist()
    }
    assert "createXferReq: metadata for remote agent '<str>' not found" in texts
    assert "context_corruption" in texts
    quoting = [t for t in texts if t and "could not parse the tool call" in t]
    assert quoting == []
    values = pq.read_table(io.BytesIO(m["tables/line_values.parquet"])).to_pylist()
    assert {"name": "agent", "value": "decode-7"} in [
        {k: v[k] for k in ("name", "value")} for v in values
    ]
    # every template the report and the suspects quote is readable, but the prompt's
    for name in ("report.txt", "suspects.txt"):
        quoted = re.findall(r"“([^”]*)”", m[name].decode())
        assert quoted and not [q for q in quoted if q.startswith("hmac:")], (name, quoted)


def test_with_inputs_adds_the_raw_files_and_refuses_redaction(
    incident: Path, tmp_path: Path
) -> None:
    res = bundle(incident / "forensics.duckdb", tmp_path / "i.tar.zst", with_inputs=True)
    m = _members(tmp_path / "i.tar.zst")
    raw = [n for n in m if n.startswith("inputs/")]
    assert any(n.endswith("decode-9.log") for n in raw) and len(raw) == len(
        orjson.loads(m["sources.json"])
    )
    log = next(m[n] for n in raw if n.endswith("decode-9.log")).decode()
    assert PROMPTS[0] in log and "http://***@10.0.4.11" in log  # the input, scrubbed
    assert res.members == list(m)
    r = cli("bundle", "--db", str(incident / "forensics.duckdb"), "--with-inputs",
            "--redact-prompts", "--out", str(tmp_path / "x.tar.zst"))  # fmt: skip
    assert r.returncode == 2 and b"cannot be combined" in r.stderr
    assert not (tmp_path / "x.tar.zst").exists()


def test_cli_prints_the_key_once(incident: Path, tmp_path: Path) -> None:
    r = cli("bundle", "--db", str(incident / "forensics.duckdb"), "--redact-prompts",
            "--out", str(tmp_path / "c.tar.zst"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(b"HMAC-SHA256 under the key ") == 1
    assert (tmp_path / "c.tar.zst").stat().st_size > 0


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("GET http://user:pw@host:1/x", "GET http://***@host:1/x"),
        ("Authorization: Bearer abcdefghijkl", "Authorization: Bearer ***"),
        ('{"api_key": "k-123"}', '{"api_key": "***"}'),
        ("--api-key s3cr3t --port 1", "--api-key *** --port 1"),
        ("token sk-abcdefghijklmnopqrstuv end", "token sk-*** end"),
        ("room=7301934425522180813 ok", "room=7301934425522180813 ok"),
        ("postgres://u:P@SS/word@db:5432/x", "postgres://***@db:5432/x"),
        ("redis://:PASS@cache:6379", "redis://***@cache:6379"),
        ("http://u:p%40ss@h/", "http://***@h/"),
        ("http://u:pw@[::1]:8080/v1", "http://***@[::1]:8080/v1"),
        ('{"url": "http:\\/\\/u:pw@h\\/x"}', '{"url": "http:\\/\\/***@h\\/x"}'),
        ('{"url": "http:\\u002f\\u002fu:pw@h"}', '{"url": "http:\\u002f\\u002f***@h"}'),
        ("http:&#x2F;&#x2F;u:pw@h", "http:&#x2F;&#x2F;***@h"),
        (
            "ServerArgs(hf_token='x1', ssl_keyfile_password='pw1x', api_key='k-1')",
            "ServerArgs(hf_token='***', ssl_keyfile_password='***', api_key='***')",
        ),
        (
            '{"aws_secret_access_key": "wJalrXUtnFEMI/K7MDENG", "tp_size": 2}',
            '{"aws_secret_access_key": "***", "tp_size": 2}',
        ),
        ("GET /v1/models?token=abc123&x=1", "GET /v1/models?token=***&x=1"),
        (
            "--hf-token hfabc --port 1 --max-total-tokens 5",
            "--hf-token *** --port 1 --max-total-tokens 5",
        ),
        (
            "Prefill batch, #new-seq: 1, #new-token: 896, #cached-token: 0",
            "Prefill batch, #new-seq: 1, #new-token: 896, #cached-token: 0",
        ),
        (
            "tokenizer_path='/m/tok' max_prefill_tokens=16384",
            "tokenizer_path='/m/tok' max_prefill_tokens=16384",
        ),
        ("AKIAIOSFODNN7EXAMPLE ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIA*** gh_***"),
        (
            "github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
            "github_pat_***",
        ),
        ("hf_abcdefghijklmnopqrstuvwxyz12", "hf_***"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "jwt jwt-***",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\nafter",
            "-----PRIVATE KEY ***-----\nafter",
        ),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
            "-----PRIVATE KEY ***-----",
        ),
    ],
)
def test_scrub(text: str, kept: str) -> None:
    """Python's patterns, and the same in DuckDB (the bundle's views scrub in SQL)."""
    assert scrub(text) == kept
    con = duckdb.connect()
    assert con.execute(f"SELECT {sql_scrub('$1::VARCHAR')}", [text]).fetchall()[0][0] == kept


def test_redaction_keeps_the_closed_vocabularies(tmp_path: Path) -> None:
    """KVPoll states are SGLang's enumeration, not user text: `--redact-prompts` keeps
    them (transfers.reason declares them), while the reason's own text is HMAC'd."""
    db = tmp_path / "s.duckdb"
    forensics.demo(tmp_path / "inc", db=db, stock=True)
    plain = [h["kvpoll"] for h in forensics.report(db).as_dict()["stock"]["hosts"]]
    assert any(plain)
    bundle(db, tmp_path / "b.tar.zst", redact_prompts=True)
    m = _members(tmp_path / "b.tar.zst")
    doc = orjson.loads(m["report.json"])
    assert [h["kvpoll"] for h in doc["stock"]["hosts"]] == plain
    assert b"no state" not in m["report.txt"]
    reasons = pq.read_table(io.BytesIO(m["tables/request_evidence.parquet"])).to_pylist()
    texts = [str(v) for r in reasons for v in r.values() if isinstance(v, str)]
    assert not any("timed out after" in t for t in texts)  # the reason's text is gone


def test_a_windowed_bundle_says_its_window_and_prints_each_line_once(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    forensics.demo(tmp_path / "inc", db=db)
    with open_scope(db, since="2026-11-29T07:00:02Z") as s:
        res = bundle(s, tmp_path / "w.tar.zst")
    m = _members(tmp_path / "w.tar.zst")
    assert "It covers a window only: since 2026-11-29 07:00:02.000Z;" in m["README.txt"].decode()
    assert orjson.loads(m["report.json"])["window"] == {
        "since": "2026-11-29 07:00:02.000Z", "until": None}  # fmt: skip
    said = res.sentences()
    assert len(said) == len(set(said))
    doc = orjson.loads(m["report.json"])
    assert all(f"  {line}" in m["README.txt"].decode() for line in doc["headline"])
    said = doc["conclusions"]
    assert len(said) == len(set(said)), [ln for ln in said if said.count(ln) > 1]


def test_named_values_hold_secrets_the_bundle_scrubs(incident: Path) -> None:
    """The secrets are in the lines' named values before the scrub (the no-secret test
    above reads every member after it, the `lines` table's shards among them)."""
    con = connect_read_only(incident / "forensics.duckdb")
    try:
        held = con.execute(
            "SELECT list(DISTINCT v) FROM lines, unnest(map_values(named)) AS t(v)"
        ).fetchone()[0]
    finally:
        con.close()
    assert {"Kf-555", "hf_abcdefghijklmnopqrstuvwxyz0123"} <= set(held)


@pytest.mark.parametrize("fmt", ["short-iso-precise", "json", "cat"])
def test_a_token_split_at_linemax_is_scrubbed_across_the_split(tmp_path: Path, fmt: str) -> None:
    """journald cuts a stdout line at LineMax (48 KiB): a Bearer token at the cut leaves
    its head at the end of one entry and its tail at the start of the next, where no
    pattern alone sees a token. Real journals, rendered by journalctl."""
    from forensics.synthetic.journal_writer import export_entry, render, write_journal

    token = "eyAbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    line = b"upstream call Authorization: Bearer " + token.encode() + b" done"
    cut = line.index(token.encode()) + 17  # the split falls inside the token
    head = b"[2026-11-29 07:00:00 TP0] " + b"x" * (48 * 1024 - cut - 26) + line[:cut]
    assert len(head) == 48 * 1024
    pieces = [(head, "line-max"), (line[cut:], None), (b"the next line", None)]
    stream = b"".join(export_entry([
        ("__REALTIME_TIMESTAMP", 1_795_935_600_000_000 + i), ("__MONOTONIC_TIMESTAMP", 5 + i),
        ("_BOOT_ID", "a1" * 16), ("_HOSTNAME", "decode-0"), ("SYSLOG_IDENTIFIER", "python3"),
        ("_PID", 3001), ("_TRANSPORT", "stdout"), ("MESSAGE", msg),
        *([("_LINE_BREAK", brk)] if brk else []),
    ]) for i, (msg, brk) in enumerate(pieces))  # fmt: skip
    export = tmp_path / "x.export"
    export.write_bytes(stream)
    rendered = render(write_journal(export, tmp_path / "x.journal"), fmt, tmp_path / f"d.{fmt}")
    tail = token[17:]  # what the second entry starts with
    assert token[:5] in rendered.read_text() and tail in rendered.read_text()
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(rendered)], db, host="decode-0" if fmt == "cat" else None)
    bundle(db, tmp_path / "b.tar.zst", with_inputs=True)
    m = _members(tmp_path / "b.tar.zst")
    raw = next(v for n, v in m.items() if n.startswith("inputs/")).decode()
    for piece in (token, token[:16], tail[-12:], tail):
        assert piece not in raw, piece
    assert "the next line" in raw and "done" in raw  # the rest kept


def test_a_run_named_after_a_url_with_user_info_is_scrubbed_not_a_crash(tmp_path: Path) -> None:
    """The run name is text too: scrubbed, the scope's runs follow it (it was a KeyError
    whose line printed the password)."""
    log = tmp_path / "decode-0.log"
    log.write_text("[2026-09-24 01:50:40] Decode batch, #running-req: 3, #token: 10, "
                   "token usage: 0.01, gen throughput (token/s): 1.0, #queue-req: 0\n")  # fmt: skip
    db = tmp_path / "db.duckdb"
    forensics.ingest([str(log)], db, run="http://alice:hunter2@router:30000")
    for args in (["bundle", "--out", str(tmp_path / "b.tar.zst")],
                 ["dashboard", "--scrub", "--out", str(tmp_path / "d.html")],
                 ["bundle", "--run", "http://alice:hunter2@router:30000", "--out",
                  str(tmp_path / "c.tar.zst")]):  # fmt: skip
        r = cli(*args, "--db", str(db))
        assert r.returncode == 0, r.stderr.decode()
        assert b"hunter2" not in r.stderr + r.stdout
    r = cli("bundle", "http://alice:hunter2@router:30000", "--db", str(db))  # a usage error
    assert r.returncode == 2 and b"hunter2" not in r.stderr and b"router:30000" in r.stderr
    m = _members(tmp_path / "b.tar.zst")
    assert _found(m, "hunter2") == [] and _found(m, "router:30000")
    assert "hunter2" not in (tmp_path / "d.html").read_text()
