"""Hostile values reach the terminal as text: rich markup (`[/x]`, `[bold]…`), emoji codes,
ESC/OSC sequences (a hyperlink, a cleared screen), C1 controls and bidi overrides in runs,
hosts, rids, reasons, messages and paths are shown escaped by every command the CLI
registers — a command added later fails here until it is listed."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
import typer.main

import forensics
from forensics.cli import app
from forensics.synthetic.planted import generate_planted, write_planted

from .helpers import cli

OSC_LINK = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"
RUN = "[/x]"
HOST = "[/h]dec" + OSC_LINK + "\u202eode"
RID = "[/rid0]" + "\x1b[2J" + "\x9b31m"
REASON = "[bold]x[/bold] :warning: \u2066flip\u2069"
# What must never reach a terminal raw: ESC, C1, bidi controls.
CRASH = re.compile(r"MarkupError|unexpected [A-Z]\w*:")
RAW = re.compile("[\x1b\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    ctx = None  # neither listing nor getting a command reads it
    found: list[str] = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), (*path, name))
        else:
            found.append(" ".join(path))

    walk(group, ())
    return found


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """An incident whose run, host, a rid, a reason and messages are hostile, ingested
    through the CLI (its summary is checked too)."""
    d = tmp_path_factory.mktemp("hostile") / "[p]"
    prefill, decode, results = write_planted(generate_planted("host", requests=40, sessions=4), d)
    rows = [orjson.loads(x) for x in results.read_bytes().splitlines() if x.strip()]
    rows[0]["rid"], rows[0]["reason"], rows[0]["corrupted"] = RID, REASON, True
    results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    log = d / "odd [bold]f \u202e.log"
    log.write_text(
        "2026-11-29T07:00:01.000001+0000 decode-9 python3[3001]: [/m] "
        + OSC_LINK
        + " \x9b2J :smile: \u202egnp.exe\n"
        "2026-11-29T07:00:02.000001+0000 decode-9 python3[3001]: [bold]bold?[/bold]\n",
        encoding="utf-8",
    )
    db = d / "inc.duckdb"
    first = cli("ingest", str(prefill), str(decode), str(results), "--db", str(db),
                "--run", "incident")  # fmt: skip
    assert first.returncode == 0, first.stderr.decode()
    second = cli("ingest", str(log), "--db", str(db), "--run", RUN, "--host", HOST)
    assert second.returncode == 0, second.stderr.decode()
    assert RUN in second.stdout.decode() and not RAW.search(second.stdout.decode())
    return {"db": db, "dir": d, "log": log, "results": results}


def _args(name: str, h: dict, tmp: Path) -> tuple[list[str], set[int]]:
    """The arguments each command runs with, and the exit codes it may end with."""
    db = ["--db", str(h["db"])]
    table: dict[str, tuple[list[str], set[int]]] = {
        "ingest": (
            [str(h["log"]), "--db", str(tmp / "new.duckdb"), "--run", RUN, "--host", HOST],
            {0},
        ),
        "sql": ([f"SELECT e.host, e.message, s.run FROM {JOINED}", *db], {0}),
        "query": (["requests", *db], {0}),
        "rooms": ([*db], {0}),
        "correlate": ([*db], {0}),
        "suspects": ([*db, "--run", "incident"], {0}),
        "compare": (["incident", RUN, *db], {0, 2}),
        "skew": ([*db], {0}),
        "follow": ([RID, *db], {0, 2}),
        "canary": ([*db], {0}),
        "report": ([*db], {0}),
        "dashboard": ([*db, "--out", str(tmp / "d [bold]o.html")], {0}),
        "trace": ([*db, "--out", str(tmp / "t [bold]o.pftrace")], {0}),
        "bundle": ([*db, "--out", str(tmp / "b [bold]o.tar.zst")], {0}),
        "patterns": (["--check", str(tmp / "[bold]none.toml")], {2}),
        "repro": ([f"http://127.0.0.1:9/{RUN}", "--run", RUN, *REPRO, str(tmp / "r.jsonl")], {2}),
        "upgrade": ([*db], {0}),
        "verify": ([*db], {0}),
        "copy": ([str(tmp / "c [bold]x.duckdb"), *db], {0}),
        "mv": ([str(tmp / "n [bold]x.duckdb"), "--db", str(tmp / "m [bold]x.duckdb")], {0}),
        "demo": (["--dir", str(tmp / "demo [bold]d")], {0}),
        "sources remove": (["99", *db], {2}),
        "sources relabel": (["4", "--host", HOST, *db], {0}),
        "sources dedupe": (["4", "--against", "2", *db], {0}),
        "sources restore": (["4", *db], {0}),
        "runs": ([*db], {0}),
        "templates": ([*db, "--new-since", "incident"], {0}),
        "runs rename": ([RUN, f"{RUN}-again", "--db", str(tmp / "m [bold]x.duckdb")], {0}),
        "runs merge": ([RUN, "incident", "--db", str(tmp / "m [bold]x.duckdb")], {0}),
        "experiment ab": ([_plan(tmp, "ab"), "--dry-run"], {0}),
        "experiment check": (
            [_plan(tmp, "check"), *db, "--out", str(tmp / "e [bold]o")],
            {128},
        ),
        "experiment minimize": ([_plan(tmp, "minimize")], {128}),
    }
    return table[name]


def _plan(tmp: Path, verb: str) -> str:
    """A plan whose arm names, flags and keys are hostile: a dry run shows them, a server
    that is not there and an unknown key are errors."""
    arms = "".join(f'[[arms]]\nname = {orjson.dumps(n).decode()}\nflags = "--x {RUN}"\n'
                   f'url = "http://127.0.0.1:9/{i}"\n'
                   for i, n in enumerate((RUN, HOST) if verb == "ab" else (HOST,)))  # fmt: skip
    body = {
        "ab": arms,
        "check": f"url = \"http://127.0.0.1:9\"\ngood_rate = 0.01\nbad_rate = 0.2\n"
                 f"sessions = 1\nrounds = 1\ntimeout_s = 2.0\n{arms}",
        "minimize": f"{orjson.dumps(RID).decode()} = 1\n",
    }[verb]  # fmt: skip
    path = tmp / f"[bold]{verb}.toml"
    path.write_text(body, encoding="utf-8")
    return str(path)


COMMANDS = _commands()
REPRO = ["--sessions", "1", "--rounds", "1", "--timeout", "2", "--out"]
JOINED = "entries e JOIN sources s USING (source_id)"


def test_every_registered_command_is_listed(hostile: dict, tmp_path: Path) -> None:
    missing = []
    for name in COMMANDS:
        try:
            _args(name, hostile, tmp_path)
        except KeyError:
            missing.append(name)
    assert not missing, f"list these commands in _args: {missing}"


@pytest.mark.parametrize("name", COMMANDS)
def test_hostile_values_are_shown_escaped(name: str, hostile: dict, tmp_path: Path) -> None:
    args, codes = _args(name, hostile, tmp_path)
    if name in ("mv", "runs rename", "runs merge"):  # a copy to change: they change it
        forensics.copy_incident(hostile["db"], tmp_path / "m [bold]x.duckdb")
    for json in ([], ["--json"]):
        if json and name not in (
            "ingest",
            "report",
            "rooms",
            "follow",
            "suspects",
            "runs",
            "templates",
            "experiment ab",
            "experiment check",
            "experiment minimize",
        ):
            continue
        if json and name == "ingest":
            args[args.index("--db") + 1] = str(tmp_path / "again.duckdb")
        proc = cli(*name.split(), *args, *json)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert proc.returncode in codes, (name, proc.returncode, err)
        for text in (out, err):
            assert not CRASH.search(text), (name, text)
            assert "Traceback" not in text, (name, text)
            assert not RAW.search(text), (name, RAW.search(text), text[:2000])
        if json and out.strip():
            orjson.loads(out)  # escapes keep it JSON


def test_values_reach_the_terminal_as_typed(hostile: dict) -> None:
    db = ["--db", str(hostile["db"])]
    proc = cli("sql", "SELECT host, message FROM entries WHERE host LIKE '[/h]%' ORDER BY ALL",
               *db, "--format", "table")  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode().replace("\n", "").replace("│", "").replace(" ", "")
    assert "[/h]dec\\u001b]8;;" in text  # the host, its OSC link escaped
    assert "[bold]bold?[/bold]" in text and ":smile:" in text
    follow = cli("follow", RID, *db)
    assert follow.returncode == 0, follow.stderr.decode()
    assert "[/rid0]\\u001b[2J\\u009b31m" in follow.stdout.decode().replace("\n", "")
    sources = cli("sources", *db)
    assert "[bold]f" in sources.stdout.decode() and "\\u202e" in sources.stdout.decode()


def test_a_templates_named_values_are_shown_escaped(tmp_path: Path) -> None:
    """`templates --show ID` lists the values a line names: a hostile one (an escape in
    a peer's name, a bidi control and a screen clear after it) reaches the terminal
    escaped, as typed."""
    log = tmp_path / "v.log"
    log.write_text("".join(
        f"[2026-11-29 07:00:0{i}] KV transfer failed, peer=n{i}\x1b[2J\u202e\n"
        for i in range(3)), encoding="utf-8")  # fmt: skip
    db = tmp_path / "v.duckdb"
    assert cli("ingest", str(log), "--db", str(db), "--host", "d0").returncode == 0
    ids = cli("sql", "SELECT DISTINCT printf('%016x', template) FROM lines", "--db", str(db),
              "--format", "csv").stdout.decode().split()  # fmt: skip
    shown = cli("templates", "--show", ids[-1], "--db", str(db))
    out = shown.stdout.decode()
    assert shown.returncode == 0, shown.stderr.decode()
    assert "peer" in out and "n0\\u001b" in out
    assert not RAW.search(out) and not CRASH.search(out + shown.stderr.decode())
