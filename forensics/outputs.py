"""Files the commands write: whole or not at all (a temp file beside, then a rename)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import ForensicsError


@contextmanager
def replacing(
    path: str | os.PathLike, make_parents: bool = False, mode: int | None = None
) -> Iterator[Path]:
    """A temporary path in the target's folder; renamed onto `path` only when the block
    succeeds, so a full disk or an interruption never leaves a short or empty file.
    `mode`: the file's permissions (default: what the umask gives a new file)."""
    target = Path(path)
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise ForensicsError(f"cannot write {target}: {exc.strerror}") from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp makes the file 0600: the result gets what any new file would (umask)
        os.chmod(tmp_path, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp_path, target)
    except OSError as exc:
        raise ForensicsError(f"cannot write {target}: {exc.strerror}") from None
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: str | os.PathLike, text: str, make_parents: bool = False) -> None:
    with replacing(path, make_parents) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _umask() -> int:
    mask = os.umask(0)  # reading the umask means setting it: set it straight back
    os.umask(mask)
    return mask


JSON_SAFE_INT = 2**53  # past it a JSON reader's double rounds (jq: …818375 -> …818500)


def json_safe(doc):
    """`doc` with every integer past ±2^53 (rooms: SGLang's 63-bit bootstrap_room) as a
    decimal string, so that any JSON reader keeps it whole."""
    if isinstance(doc, bool):
        return doc
    if isinstance(doc, int):
        return str(doc) if abs(doc) >= JSON_SAFE_INT else doc
    if isinstance(doc, dict):
        return {k: json_safe(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [json_safe(v) for v in doc]
    return doc
