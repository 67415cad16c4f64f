"""Which journalctl rendering a byte stream is, from its first lines."""

from __future__ import annotations

import re

from .text import _UNIT_SUFFIXES, TEXT_FORMATS, header_regex

JOURNAL_MAGIC = b"LPKSHHRH"
SNIFF_BYTES = 256 << 10
_EXPORT_FIELD = re.compile(rb"^[A-Z0-9_]+(?:=|\n)")
_EXPORT_HINT = re.compile(rb"(?m)^(?:__CURSOR|__REALTIME_TIMESTAMP|MESSAGE|_HOSTNAME)[=\n]")
_BOOT = re.compile(r"^-- .* --$")
# Most specific first: a short-iso-precise line also fits nothing else, but "cat" fits all.
_ORDER = [
    "short-iso-precise",
    "short-iso",
    "short-full",
    "short-precise",
    "short",
    "short-unix",
    "short-monotonic",
]
_REGEXES = {name: re.compile(header_regex(TEXT_FORMATS[name])) for name in _ORDER}


class UnknownFormat(ValueError):
    pass


def _binary(window: bytes) -> bool:
    """Binary data, not text with a stray NUL in a line (a line a writer's crash left half
    zeroed is quarantined by the reader, not the whole file): NULs past 1 % of the bytes,
    or a run of 8."""
    nuls = window.count(b"\x00")
    return nuls * 100 > len(window) or b"\x00" * 8 in window


def sniff(head: bytes) -> str:
    """Format name for a stream starting with `head` (decompressed)."""
    if head.startswith(JOURNAL_MAGIC):
        return "journal"
    body = head.lstrip(b"\n\r\t ")
    if not body:
        return "cat"
    if body[:1] == b"\x1e":
        return "json-seq"
    if body[:1] == b"{":
        return "json"
    if _EXPORT_FIELD.match(body) and _EXPORT_HINT.search(body[:SNIFF_BYTES]):
        return "export"
    if _binary(head[:4096]):
        raise UnknownFormat("binary data that is neither a .journal file nor an export stream")
    lines = [
        ln
        for ln in head.decode("utf-8", "replace").splitlines()[:200]
        if ln.strip() and not _BOOT.match(ln)
    ]
    if lines and len(lines) == len(head.splitlines()) and not head.endswith(b"\n"):
        lines = lines[:-1] or lines  # the last line may be cut by the sniff window
    best, best_hits = "cat", 0
    for name in _ORDER:
        hits = sum(1 for ln in lines if _REGEXES[name].match(ln + "\n"))
        if hits > best_hits:
            best, best_hits = name, hits
    if best == "short-full":
        idents = [m.group("ident") for ln in lines if (m := _REGEXES[best].match(ln + "\n"))]
        units = sum(1 for i in idents if i.endswith(_UNIT_SUFFIXES))
        if units * 2 > len(idents):
            best = "with-unit"
    return best
