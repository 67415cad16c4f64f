"""The documents that describe the CLI are the CLI's: docs/commands.md is generated from
it and lists every command and option, each with its help."""

from __future__ import annotations

from pathlib import Path

from forensics.cli import app
from forensics.clidoc import markdown, undocumented, walk

ROOT = Path(__file__).resolve().parent.parent


def test_commands_md_is_generated_from_the_cli() -> None:
    doc = (ROOT / "docs" / "commands.md").read_text()
    assert doc == markdown(app), "run: python -m forensics.clidoc > docs/commands.md"


def test_every_command_and_option_is_documented() -> None:
    import typer.main

    assert undocumented(app) == []
    names = [n for n, _ in walk(typer.main.get_command(app))]
    doc = (ROOT / "docs" / "commands.md").read_text()
    assert {"follow", "runs", "runs rename", "runs merge", "sources relabel"} <= set(names)
    assert all(f"## `forensics {n}`" in doc for n in names)


def test_the_readmes_python_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    """Its DuckDB and offline-trace snippets, as printed, against a demo incident."""
    import re

    import forensics

    forensics.demo(tmp_path / "demo", db=tmp_path / "incident" / "incident.duckdb")
    forensics.trace(tmp_path / "incident" / "incident.duckdb", tmp_path / "incident.pftrace")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "decode-0" in out and "packets; tracks:" in out
