"""Every input form pd-forensics reads, sniffed in one place, in the order that keeps them
apart: harness results, JSON-lines logs by their keys (jsonlines.py: docker's, SGLang's
metrics, Dynamo's, zap's, journalctl's json, any other JSON log), a collector's prefix
(docker, kubectl), journalctl's text renderings, and last a program's own log (SGLang's
stdout), which journalctl would call `cat`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa

from .journald import FORMATS as JOURNAL_FORMATS
from .journald import ReadContext, read_entries, sniff
from .jsonlines import sniff_json_lines
from .plain import PLAIN_FORMATS, read_plain, sniff_collector, sniff_program
from .results import RESULT_FORMATS, sniff_results

FORMATS = [*JOURNAL_FORMATS, *PLAIN_FORMATS]  # what --format takes (results are sniffed)


def json_formats_markdown() -> str:
    """The JSON-lines formats as a Markdown table, in the order they are sniffed
    (docs/details.md carries it)."""
    from .jsonlines import DECLARED

    rows = ["| format | what it is | its first line holds |", "|---|---|---|"]
    for d in DECLARED:
        needs = " and ".join("/".join(f"`{k}`" for k in group) for group in d.needs) or "—"
        rows.append(f"| `{d.name}` | {d.doc} | {needs} |")
    return "\n".join(rows) + "\n"


def sniff_input(head: bytes) -> str:
    """The form of a stream starting with `head` (raises UnknownFormat, NotResults)."""
    found = sniff_results(head) or sniff_json_lines(head) or sniff_collector(head) or sniff(head)
    return (sniff_program(head) or found) if found == "cat" else found


def read_stream(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    """Entries of a log stream in a known form (not "journal", not results)."""
    if fmt in PLAIN_FORMATS:
        return read_plain(stream, fmt, ctx)
    return read_entries(stream, fmt, ctx)


__all__ = ["FORMATS", "RESULT_FORMATS", "read_stream", "sniff_input"]
