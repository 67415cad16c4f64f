"""Format sniffing on real renderings and on the awkward starts of files."""

from __future__ import annotations

import pytest
from forensics.parsers.journald import UnknownFormat, sniff

from . import corpus


@pytest.mark.parametrize("fmt", corpus.TEXT_RENDERINGS + corpus.STRUCTURED_RENDERINGS)
def test_sniffs_every_real_rendering(renderings, fmt: str) -> None:
    assert sniff(renderings[fmt].read_bytes()[:65536]) == fmt


def test_sniffs_journal_files(renderings) -> None:
    assert sniff(renderings["journal"].read_bytes()[:4096]) == "journal"


def test_boot_marker_first_line() -> None:
    head = b"-- Boot 0123456789abcdef0123456789abcdef --\n2026-11-29T07:00:01+0000 h a[1]: x\n"
    assert sniff(head) == "short-iso"


def test_binary_garbage_is_unknown() -> None:
    with pytest.raises(UnknownFormat):
        sniff(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")


def test_plain_application_log_is_cat() -> None:
    assert sniff(b"[2026-11-29 07:00:01 TP0] Decode batch, #running-req: 5\n") == "cat"
