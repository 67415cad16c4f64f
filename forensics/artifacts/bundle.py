"""`forensics bundle`: one file for a bug report.

Everything in it is read through one connection whose tables are shadowed by views that
scrub secrets (URL user-info, Authorization headers, API keys) out of every text column,
and, with `redact_prompts`, replace every user-text column by an HMAC-SHA256 of it under
a key made for this bundle, printed once and stored nowhere. The named views are put
back over those shadows from their SQL, so the report, the suspects, the dashboard, the
trace and the Parquet tables all see the same cleaned rows; the text members are scrubbed
once more as text.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata as md
import io
import os
import platform
import re
import secrets
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import orjson
import zstandard

from .. import __version__
from ..analyses.runs import Runs, run_filter
from ..errors import ForensicsError
from ..outputs import json_safe, replacing
from ..parsers.tables import MASKED, SHARDED, USER_TEXT
from ..scope import Db, Scope, scoped
from ..scrubbing import scrub, scrub_input, scrubbed
from ..scrubbing import shadow as scrub_tables
from .user_text import UserText

# The columns that can hold what a user wrote (parsers/tables.py declares them, and the
# closed vocabularies kept inside them): replaced by their HMAC under --redact-prompts.
# Ids, hosts, numbers and verdicts stay.
VOCABULARY = {(t.name, c.name): c.vocabulary for t in SHARDED.values()
              for c in t.all_columns if c.vocabulary}  # fmt: skip
JSON_COLUMNS = {"extra", "fields"}
BLOBS = {"entries": ["message_raw"], "dropped_entries": ["message_raw"]}
# DuckDB's share while a bundle is made (FORENSICS_MEMORY_LIMIT overrides)
KEEP_MEMORY = os.environ.get("FORENSICS_MEMORY_LIMIT", "512MB")
# beside every named view of queries/: the records the stacks write beside the journal
STACK_RECORDS = ("spans", "request_traces", "collectives")


def views_as_parquet() -> list[str]:
    """What tables/ holds: every named view (queries/*.sql), then the stacks' records."""
    from ..queries import names

    return [*names(), *(t for t in STACK_RECORDS if t not in names())]


def _map_strings(doc, fn):
    if isinstance(doc, str):
        return fn(doc)
    if isinstance(doc, list):
        return [_map_strings(v, fn) for v in doc]
    if isinstance(doc, dict):
        return {k: _map_strings(v, fn) for k, v in doc.items()}
    return doc


def shadow(con: duckdb.DuckDBPyConnection, key: bytes | None) -> None:
    """Every table behind a view that scrubs its text (scrubbing.shadow) and, with `key`,
    HMACs its user text; the named views recomputed from their SQL over them."""
    if key is None:
        scrub_tables(con, keep=True)
        return

    def mac(s: str | None) -> str | None:
        if s is None:
            return None
        return "hmac:" + hmac.new(key, s.encode(), hashlib.sha256).hexdigest()[:32]

    def mac_json(s: str | None) -> str | None:
        # JSON columns stay JSON (the views parse them): every string in them HMAC'd
        if s is None:
            return None
        try:
            doc = orjson.loads(s)
        except orjson.JSONDecodeError:
            return orjson.dumps(mac(s)).decode()
        return orjson.dumps(_map_strings(doc, mac)).decode()

    def mac_keeping(s: str | None, words: str) -> str | None:
        # fail closed: the text goes; only the closed vocabulary's tokens it names stay
        if s is None:
            return None
        said = set(re.findall(r"[\w.]+", s))
        kept = [w for w in words.split() if w in said]
        return " ".join([mac(s), *kept])

    # before the shadows: the prompts and replies as stored
    keep_template = _template_keeper(UserText.of(con), mac)
    con.create_function("fx_hmac", mac, ["VARCHAR"], "VARCHAR", null_handling="special")
    con.create_function("fx_keep_template", keep_template, ["VARCHAR"], "VARCHAR",
                        null_handling="special")  # fmt: skip
    con.create_function("fx_hmac_keeping", mac_keeping, ["VARCHAR", "VARCHAR"], "VARCHAR",
                        null_handling="special")  # fmt: skip
    con.create_function("fx_hmac_json", mac_json, ["VARCHAR"], "VARCHAR",
                        null_handling="special")  # fmt: skip

    scrub_tables(con, _redacted, keep=True)


def _template_keeper(user: UserText, mac):
    """A masked text as it is, or its HMAC where it holds a piece of a user text; a
    template repeats on every line it reads, so each is judged once."""
    kept: dict[str, str] = {}

    def keep(s: str | None) -> str | None:
        if s is None:
            return None
        if (got := kept.get(s)) is not None:
            return got
        got = mac(s) if user.holds(s) else s
        if len(kept) < 100_000:  # unique values (ids) would only fill it
            kept[s] = got
        return got

    return keep


def _redacted(table: str, col: str, typ: str) -> str | None:
    """A user-text column's HMAC (the fx_hmac functions `shadow` installs), blobs gone."""
    q = f'"{col}"'
    if (table, col) in MASKED and (clean := scrubbed(q, typ)) is not None:
        # a template is scrubbed like every text first (a value it names may be a secret)
        if typ.startswith("MAP("):
            return _mapped_values(clean, "fx_keep_template")
        return f"fx_keep_template({clean}::VARCHAR)::{typ}"
    if col in USER_TEXT.get(table, []):
        if words := VOCABULARY.get((table, col)):
            return f"fx_hmac_keeping({q}::VARCHAR, '{' '.join(words)}')::{typ}"
        if typ.startswith("MAP("):
            return _mapped_values(q, "fx_hmac")
        fn = "fx_hmac_json" if col in JSON_COLUMNS else "fx_hmac"
        return f"{fn}({q}::VARCHAR)::{typ}"
    if col in BLOBS.get(table, []):
        return "NULL::BLOB"
    return None


def _mapped_values(col: str, fn: str) -> str:
    """A MAP column's values through `fn`, each under its key (named values)."""
    return (f"map_from_entries(list_transform(map_entries({col}), lambda e: "
            f"{{'key': e.key, 'value': {fn}(e.value)}}))")  # fmt: skip


@dataclass
class BundleResult:
    out: Path
    members: list[str]
    bytes: int
    seconds: float
    redacted: bool
    key: str | None = field(default=None, repr=False)  # printed once, stored nowhere
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {k: (str(v) if k == "out" else v) for k, v in self.__dict__.items()}

    def sentences(self) -> list[str]:
        out = [f"wrote {self.out} ({len(self.members)} files, {self.bytes / 2**20:,.1f} MB, "
               f"{self.seconds:.1f} s): {', '.join(self.members)}"]  # fmt: skip
        if self.key:
            out.append(f"user text replaced by HMAC-SHA256 under the key {self.key} "
                       "(shown once, stored nowhere: keep it to match texts later)")  # fmt: skip
        return list(dict.fromkeys(out + self.notes))


README = """pd-forensics evidence bundle
============================

Made by pd-forensics {version} on {when} from {db}{runs}.{window}
{headline}
Secrets (URL user-info, Authorization headers, tokens, passwords, keys, and values shaped
like a known kind of secret) were scrubbed from every file. The bundle is written 0600:
it holds prompts and replies unless made with --redact-prompts.
{redaction}
report.txt / report.json     `forensics report`: coverage, verdicts, correlations,
                             suspects, runs, canary, skew; ends in bug-report sentences
suspects.txt / suspects.json `forensics suspects`: every recorded factor ranked
dashboard.html               `forensics dashboard`: one offline page
incident.pftrace             `forensics trace`: open at https://ui.perfetto.dev
sources.json                 every ingested input: path, sha256, counts, notes
runs.json                    the runs and their tags (the reproducer's run headers,
                             with the server info it recorded)
versions.json                pd-forensics, Python, each dependency; SGLang's version
                             and server arguments where the logs or runs hold them
tables/*.parquet             every named view's rows (rooms, requests, failures,
                             templates, ...) and the stacks' own records (spans,
                             request_traces, collectives)
{inputs}"""


INPUTS = """inputs/                      the raw inputs, decompressed, secrets scrubbed (their
                             sha256 in sources.json is the original's)
"""
REDACTED = """User text (messages, harness details, reasons, request objects) is replaced by
HMAC-SHA256 under a key printed once when the bundle was made. Log templates and the
values they name are kept: they are the evidence (one quoting a known prompt is not).
"""


def _versions(con: duckdb.DuckDBPyConnection, runs: list[str]) -> dict:
    """pd-forensics, Python and each dependency; SGLang's version (the reproducer's
    server info, in the runs' tags) and its server arguments (its start-up line)."""
    where, params = run_filter(runs)
    deps = {}
    for req in md.requires("pd-forensics") or []:
        name = re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0]
        if "extra ==" in req:
            continue
        try:
            deps[name] = md.version(name)
        except md.PackageNotFoundError:
            deps[name] = None
    tags = [dict(t or {}) for (t,) in con.execute(
        f"SELECT tags FROM runs WHERE {where}", params).fetchall()]  # fmt: skip
    sglang = sorted({t[k] for t in tags for k in t if "version" in k.lower()})
    of_runs, _ = run_filter(runs, "a.run")
    args = [m for (m,) in con.execute(  # SGLang's and vLLM's start lines (the server_args view)
        f"""SELECT any_value(e.message) FROM server_args a
            JOIN entries e USING (source_id, entry_no)
            WHERE {of_runs} GROUP BY a.host ORDER BY a.host""", params).fetchall()]  # fmt: skip
    return {
        "pd-forensics": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "dependencies": deps,
        "sglang": {"versions_in_runs": sglang, "server_args_lines": args},
    }


def _spill_to(con: duckdb.DuckDBPyConnection, tmp: str) -> None:
    """The scrubbed rows a bundle keeps in temporary tables spill to its own folder past
    a share of the memory, beside what the trace holds in Python."""
    con.execute("SET temp_directory = ?", [tmp])
    con.execute(f"SET memory_limit = '{KEEP_MEMORY}'")


def _scrubbed_input(path: Path, sha256: str) -> tuple[bytes | None, str]:
    """A raw input, decompressed, its secrets scrubbed as in every other member (so not
    byte for byte the file: sources.json keeps the original's sha256). Only the file that
    was ingested: one whose sha256 differs now (changed, replaced, or another host's file
    at the same path) is left out. A binary .journal cannot be scrubbed: left out (its
    entries are in the tables)."""
    from ..store.inputs import Input, open_input

    if not path.is_file():
        return None, "it is no longer there"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    if h.hexdigest() != sha256:
        return None, f"its sha256 is not the ingested one ({sha256[:12]}…): not that file"
    opened = open_input(Input(str(path), path))
    try:
        data = opened.stream.read()
    finally:
        opened.stream.close()
    if data[:8] == b"LPKSHHRH":  # journald's file signature
        return None, "a binary .journal file cannot be scrubbed of secrets"
    from ..store.stage import LINE_MAX

    return scrub_input(data, LINE_MAX), ""


def _plain_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".zst", ".xz"):
        name = name.removesuffix(suffix)
    return name


def _json(doc) -> bytes:
    """A JSON member as `--json` writes it: room ids (past 2^53) as strings."""
    return orjson.dumps(json_safe(doc), default=str, option=orjson.OPT_INDENT_2)


def _text(show, result) -> bytes:
    """A command's terminal output as plain text, 100 columns wide."""
    from ..escaping import SafeConsole

    buf = io.StringIO()
    show(SafeConsole(file=buf, width=100, color_system=None), result)
    return buf.getvalue().encode()


def bundle(
    db: Db = None,
    out: str | os.PathLike = "incident.tar.zst",
    run: Runs = None,
    with_inputs: bool = False,
    redact_prompts: bool = False,
) -> BundleResult:
    """Write the evidence bundle (a zstd-compressed TAR)."""
    if with_inputs and redact_prompts:
        raise ForensicsError("--redact-prompts cannot be combined with --with-inputs: "
                             "the raw inputs hold the prompts")  # fmt: skip
    t0 = time.perf_counter()
    out = Path(out)
    key = secrets.token_hex(16) if redact_prompts else None
    notes: list[str] = []
    with scoped(db, run) as s, tempfile.TemporaryDirectory(prefix="forensics-bundle-") as tmp:
        if s.owned:  # a caller's connection keeps its settings
            _spill_to(s.con, tmp)
        shadow(s.con, key.encode() if key else None)
        s.changed()  # nothing computed before the shadows goes in
        members, headline = _answers(s, Path(tmp))
        members |= _records(s, Path(tmp), with_inputs, notes)
    for n in [n for n in members if n.endswith((".txt", ".json", ".html"))]:
        members[n] = scrub(members[n].decode("utf-8", "replace")).encode()
    readme = README.format(
        version=__version__,
        when=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        db=s.label,
        runs=f" (runs: {', '.join(s.runs)})" if s.runs else "",
        window=f"\nIt covers a window only:{s.window_text()}; nothing outside it is in any "
        "file.\n" if s.window else "",
        headline="".join(f"\n  {line}" for line in headline) + "\n",
        redaction=REDACTED if key else "",
        inputs=INPUTS if with_inputs else "",
    )  # fmt: skip
    _write_archive(out, {"README.txt": scrub(readme).encode(), **members})
    return BundleResult(out, ["README.txt", *members], out.stat().st_size,
                        time.perf_counter() - t0, redact_prompts, key, notes)  # fmt: skip


def _answers(s: Scope, tmp: Path) -> tuple[dict[str, bytes], list[str]]:
    """The report, suspects, dashboard and trace over the scope (the report's own
    ranking reused by the rest), and the headline."""
    from .. import terminal
    from ..analyses.report import report
    from ..analyses.suspects import suspects
    from ..dashboards.write import dashboard
    from .trace import trace

    rep = report(s)
    sus = suspects(s)
    return {
        "report.txt": _text(terminal.report, rep),
        "report.json": _json({**rep.as_dict(), "window": s.window}),
        "suspects.txt": _text(terminal.suspects, sus),
        "suspects.json": _json(sus.as_dict()),
        "dashboard.html": dashboard(s, None, tmp / "dashboard.html").path.read_bytes(),
        "incident.pftrace": trace(s, tmp / "incident.pftrace").out.read_bytes(),
    }, rep.headline()


def _records(s: Scope, tmp: Path, with_inputs: bool, notes: list[str]) -> dict[str, bytes]:
    """sources, runs, versions, the named views as Parquet and (asked) the inputs."""
    con, runs = s.con, s.runs
    where, params = run_filter(runs)
    cur = con.execute(
        f"SELECT * REPLACE (ingested_at::VARCHAR AS ingested_at) FROM sources WHERE {where}"
        " ORDER BY source_id", params)  # fmt: skip
    names = [d[0] for d in cur.description]
    srcs = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    rows = con.execute(
        f"SELECT run, tags, created::VARCHAR FROM runs WHERE {where}", params
    ).fetchall()
    members = {
        "sources.json": _json(srcs),
        "runs.json": _json([{"run": r, "tags": dict(t or {}), "created": c} for r, t, c in rows]),
        "versions.json": _json(_versions(con, runs)),
    }
    for view in views_as_parquet():
        path = tmp / f"{view}.parquet"
        # uncompressed: the archive compresses it, and its text stays searchable
        con.execute(f"COPY (SELECT * FROM {view} WHERE {where}) TO '{path}' "
                    "(FORMAT parquet, COMPRESSION uncompressed)", params)  # fmt: skip
        members[f"tables/{view}.parquet"] = path.read_bytes()
    for src in srcs if with_inputs else []:
        p = Path(src["path"])
        data, why = _scrubbed_input(p, src["sha256"])
        if data is None:
            notes.append(f"input {src['path']} (source {src['source_id']}) left out: {why}")
        else:
            members[f"inputs/{src['source_id']}-{_plain_name(p)}"] = data
    return members


def _write_archive(out: Path, members: dict[str, bytes]) -> None:
    # 0600: prompts and replies are in it (unless redacted), whatever the umask allows
    with replacing(out, mode=0o600) as tmp_out, open(tmp_out, "wb") as fh:
        cctx = zstandard.ZstdCompressor(level=10)
        with cctx.stream_writer(fh) as zw, tarfile.open(fileobj=zw, mode="w|") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(f"incident/{name}")
                info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
                tar.addfile(info, io.BytesIO(data))
