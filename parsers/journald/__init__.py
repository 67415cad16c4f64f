"""Readers of every journalctl rendering, chosen by sniffing; all yield ENTRY_SCHEMA batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa

from .binary import JournalctlFailed, JournalctlMissing, read_journal_file
from .context import Quarantined, ReadContext
from .export import read_export
from .jsonfmt import read_json
from .schema import COLUMNS, ENTRY_SCHEMA
from .sniff import UnknownFormat, sniff
from .text import TEXT_FORMATS, read_text

FORMATS = [*TEXT_FORMATS, "json", "json-seq", "export", "journal"]

__all__ = [
    "COLUMNS",
    "ENTRY_SCHEMA",
    "FORMATS",
    "JournalctlFailed",
    "JournalctlMissing",
    "Quarantined",
    "ReadContext",
    "UnknownFormat",
    "read_entries",
    "read_journal_file",
    "sniff",
]


def read_entries(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    """Entries of a stream in a known rendering (not "journal": that needs a path)."""
    if fmt in TEXT_FORMATS:
        return read_text(stream, fmt, ctx)
    if fmt in ("json", "json-seq"):
        return read_json(stream, ctx)
    if fmt == "export":
        return read_export(stream, ctx)
    raise UnknownFormat(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
