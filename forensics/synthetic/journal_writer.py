"""Writing journald's export format, and real .journal files from it.

The incident generator, the tests and the benchmark produce their inputs here, so
that the readers are exercised on what the real systemd tools write and render.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import ForensicsError

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"


def _printable(value: bytes) -> bool:
    if any(c < 32 and c != 9 for c in value):
        return False
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def export_entry(fields: Iterable[tuple[str, str | bytes | int]] | Mapping) -> bytes:
    """One entry in export format; a name may repeat (multi-valued field)."""
    items = fields.items() if isinstance(fields, Mapping) else fields
    out = bytearray()
    for name, value in items:
        if isinstance(value, int):
            value = str(value)
        raw = value.encode("utf-8") if isinstance(value, str) else value
        if _printable(raw):
            out += name.encode() + b"=" + raw + b"\n"
        else:
            out += name.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n"
    return bytes(out) + b"\n"


def journal_remote_available() -> bool:
    return Path(JOURNAL_REMOTE).exists() and shutil.which("journalctl") is not None


def write_journal(export_file: Path, journal: Path) -> list[Path]:
    """Real .journal file(s) from an export stream; returns every file written (rotations)."""
    if not Path(JOURNAL_REMOTE).exists():
        raise ForensicsError(
            "writing .journal files needs systemd-journal-remote (Debian package of that name)"
        )
    journal.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [JOURNAL_REMOTE, f"--output={journal}", str(export_file)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise ForensicsError(f"systemd-journal-remote failed: {proc.stderr.strip()[-300:]}")
    stem = journal.name.removesuffix(".journal")
    return sorted(journal.parent.glob(f"{stem}*.journal"))


def render(journals: list[Path], fmt: str, out: Path, *, all_fields: bool = True) -> Path:
    """`journalctl --file … -o fmt` into out (TZ=UTC, so renderings agree)."""
    cmd = ["journalctl", "--no-pager", "-o", fmt]
    cmd += [f"--file={j}" for j in journals]
    if all_fields:
        cmd.append("--all")
    with open(out, "wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.PIPE, env={"TZ": "UTC"})
    if proc.returncode != 0:
        raise ForensicsError(f"journalctl failed: {proc.stderr.decode()[-300:]}")
    return out
