"""docs/commands.md, written from the CLI itself: every command in the order `forensics
--help` lists them, its help, and each argument and option with its help and default.
`python -m forensics.clidoc > docs/commands.md` writes it; a test checks the file is what
this gives and that nothing is undocumented."""

from __future__ import annotations

from typing import Any

import typer.main

# Typer ≥ 0.22 carries its own copy of click: parameters and groups are told apart by what
# they are (param_type_name, commands), not by click's classes.
Command = Any

HEAD = """# Commands

Generated from the CLI (`python -m forensics.clidoc > docs/commands.md`; a test keeps it
equal): every command, argument and option. How the commands behave in depth:
[docs/details.md](details.md); the tour: the README.

Global options come before the command: `--db PATH` where a command takes it can also be
`FORENSICS_DB`; `--debug` adds the traceback to an unexpected error.
"""


def walk(group: Command, prefix: str = "") -> list[tuple[str, Command]]:
    """(full name, command) of every command and subcommand, in listing order."""
    out = []
    for name, cmd in group.commands.items():
        if cmd.hidden:
            continue
        full = f"{prefix}{name}"
        out.append((full, cmd))
        if hasattr(cmd, "commands"):
            out += walk(cmd, full + " ")
    return out


def _default(p: Any) -> str:
    if p.default is None or p.default == [] or p.param_type_name == "argument":
        return ""
    if p.is_flag:
        return "off" if not p.default else "on"
    return f"`{p.default}`"


def _argument_help(cmd: Command, name: str) -> str:
    """An argument's help from the function's annotation (Typer 0.20 keeps none on the
    click argument)."""
    import typing

    import typer.models

    fn = getattr(cmd.callback, "__wrapped__", cmd.callback)
    hint = typing.get_type_hints(fn, include_extras=True).get(name)
    for info in getattr(hint, "__metadata__", ()):
        if isinstance(info, typer.models.ArgumentInfo):
            return info.help or ""
    return ""


def _param(p: Any, cmd: Command) -> tuple[str, str, str]:
    if p.param_type_name == "argument":
        name = (p.metavar or p.name or "").upper()
        text = getattr(p, "help", None) or _argument_help(cmd, p.name)
        return f"`{name}`", text.strip(), ""
    flags = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    return flags, (p.help or "").strip(), _default(p)


def undocumented(app: typer.Typer) -> list[str]:
    """Commands without help and parameters without a description."""
    out = []
    for name, cmd in walk(typer.main.get_command(app)):
        if not (cmd.help or "").strip():
            out.append(name)
        for p in cmd.params:
            if p.name in ("help",):
                continue
            if not _param(p, cmd)[1]:
                out.append(f"{name} {p.name}")
    return out


def markdown(app: typer.Typer) -> str:
    root = typer.main.get_command(app)
    parts = [HEAD]
    for name, cmd in walk(root):
        parts.append(f"\n## `forensics {name}`\n")
        parts.append((cmd.help or "").strip().replace("\b\n", "") + "\n")
        rows = [_param(p, cmd) for p in cmd.params if p.name != "help"]
        if rows:
            parts.append("\n| argument / option | what | default |\n|---|---|---|")
            for flags, what, default in rows:
                what = " ".join(what.split()).replace("|", "\\|")
                parts.append(f"| {flags} | {what} | {default} |")
            parts.append("")
    return "\n".join(parts).rstrip() + "\n"


if __name__ == "__main__":
    from .cli import app

    print(markdown(app), end="")
