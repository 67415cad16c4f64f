"""Binary `.journal` files, read through the real `journalctl --file … -o export`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from .context import ReadContext
from .export import read_export


class JournalctlMissing(RuntimeError):
    pass


class JournalctlFailed(RuntimeError):
    pass


def journalctl() -> str:
    path = shutil.which("journalctl")
    if path is None:
        raise JournalctlMissing(
            "reading .journal files needs journalctl (Debian package: systemd); "
            "or render them elsewhere with `journalctl --file F -o export`"
        )
    return path


def read_journal_file(path: Path, ctx: ReadContext) -> Iterator[pa.Table]:
    cmd = [journalctl(), f"--file={path}", "-o", "export", "--no-pager"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        yield from read_export(proc.stdout, ctx)
        err = proc.stderr.read().decode("utf-8", "replace").strip()
        code = proc.wait()
    if code != 0 and ctx.lines == 0:
        raise JournalctlFailed(
            f"journalctl could not read {path}: {err.splitlines()[-1] if err else code}"
        )
    if err:
        # journalctl reads what it can of a damaged file and warns; keep its word.
        ctx.note(f"journalctl: {err.splitlines()[-1][:200]}")
