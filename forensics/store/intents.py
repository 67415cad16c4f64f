"""A copy or move of an incident writes its intent before anything moves, and removes it
when done: a command that finds one says how to finish, and a rerun of the same copy or
move finishes it. A move's intent lies beside the source and the destination (either
may hold the catalog when it stops); a copy's beside the destination alone, since a copy
never changes its source. A destination holding a partial copy is never opened as an
incident."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import orjson

INTENT = ".relocating"  # beside a catalog: a copy or move of it began and did not end


def _intent_file(catalog: Path) -> Path:
    return catalog.with_name(catalog.name + INTENT)


def interrupted(catalog: Path) -> str | None:
    """The line any command says where a copy or move of (or into) this catalog was
    interrupted, or None."""
    f = _intent_file(catalog)
    try:
        doc = orjson.loads(f.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError):
        doc = {}
    op, dst = doc.get("op", "mv"), doc.get("dst", "?")
    src = doc.get("src", str(catalog))
    return (f"a {'move' if op == 'mv' else 'copy'} of {src} to {dst} was interrupted: rerun "
            f"`forensics {op} {shlex.quote(dst)} --db {shlex.quote(src)}` to finish")  # fmt: skip


def _write_intent(op: str, s: Path, d: Path) -> None:
    """The intent, before anything moves: beside the destination, then (a move's) beside
    the source — so that one the destination refuses leaves the source as it was."""
    doc = orjson.dumps({"op": op, "src": str(s), "dst": str(d)})
    for where in (d, s) if op == "mv" else (d,):
        tmp = _intent_file(where).with_suffix(".tmp")
        try:
            tmp.write_bytes(doc)
            os.replace(tmp, _intent_file(where))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def _clear_intent(s: Path, d: Path) -> None:
    for where in (d, s):
        if not _intent_file(where).is_dir():  # a folder of that name is not an intent
            _intent_file(where).unlink(missing_ok=True)
