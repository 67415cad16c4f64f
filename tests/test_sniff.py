"""Format sniffing on real renderings and on the awkward starts of files."""

from __future__ import annotations

from pathlib import Path

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


def test_plain_logs_sniffed() -> None:
    from forensics.parsers.formats import sniff_input
    from forensics.parsers.plain import sniff_collector, sniff_program

    docker = b'{"log":"x\\n","stream":"stdout","time":"2026-09-20T14:03:12.5Z"}\n'
    assert sniff_input(docker) == "docker-json"  # by its keys (jsonlines.py)
    kubectl = b"2026-09-20T14:03:12.123456789Z [2026-09-20 14:03:12 TP0] Decode batch\n"
    assert sniff_collector(kubectl) == "timestamped"
    # journalctl writes offsets, never Z: its short-iso-precise is not a collector's prefix
    assert sniff_collector(b"2026-11-29T07:00:01.000000+00:00 host app[1]: x\n") is None
    assert sniff_program(b"[2026-11-29 07:00:01 TP0] Decode batch\n") == "sglang"
    assert sniff_program(b"[16:43:29 TP0] Prefill batch\n") == "sglang"
    assert sniff_program(b"hello\nworld\n") is None


def test_sniff_input_orders_every_form() -> None:
    from forensics.parsers.formats import sniff_input

    assert sniff_input(b'{"session": "s", "rid": "a", "corrupted": false}\n') == "results-jsonl"
    assert sniff_input(b"2026-09-20T14:03:12.1Z [2026-09-20 14:03:12 TP0] x\n") == "timestamped"
    assert sniff_input(b"2026-11-29T07:00:01.000000+0000 h app[1]: x\n") == "short-iso-precise"
    assert sniff_input(b"[2026-11-29 07:00:01 TP0] Decode batch\n") == "sglang"
    assert sniff_input(b"just text\n") == "cat"


def test_the_input_forms_are_one_table_in_sniff_order() -> None:
    """Formats are rows (parsers/formats.py): every reader's format is one, each in a
    family, the families in the order they are sniffed; a head of each family is sniffed
    as one of its formats; --format's list and docs/details.md's table come from them."""
    from forensics.parsers import journald, plain
    from forensics.parsers.formats import FAMILIES, FORMATS, FORMATS_TABLE, formats_markdown
    from forensics.parsers.formats import sniff_input as sniffed

    assert set(FORMATS) == set(journald.FORMATS) | set(plain.PLAIN_FORMATS)
    order = [f.name for f in FAMILIES]
    ranks = [order.index(f.family) for f in FORMATS_TABLE]
    assert ranks == sorted(ranks)
    heads = {
        "results": b'{"session": "s", "rid": "a", "corrupted": false}\n',
        "json-lines": b'{"level":"info","ts":"2026-04-23T02:14:43Z","msg":"hi"}\n',
        "collector": b"2026-09-20T14:03:12.1Z [2026-09-20 14:03:12 TP0] x\n",
        "journal": b"2026-11-29T07:00:01.000000+0000 h app[1]: x\n",
        "program": b"[2026-11-29 07:00:01 TP0] Decode batch\n",
    }
    by_name = {f.name: f.family for f in FORMATS_TABLE}
    for family, head in heads.items():
        got = sniffed(head)
        assert by_name.get(got, "results" if got.startswith("results") else None) == family
    docs = (Path(__file__).parent.parent / "docs" / "details.md").read_text(encoding="utf-8")
    assert "\n".join("  " + ln for ln in formats_markdown().splitlines()) in docs
