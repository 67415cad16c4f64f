"""A journal corpus with every hard case, written through the real systemd tools.

`build(dir)` writes an export stream, turns it into real `.journal` files with
systemd-journal-remote and renders them with journalctl in every format the readers
know. `EXPECTED` is what every reader must recover.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forensics.synthetic.journal_writer import export_entry, render, write_journal

T0 = 1_795_935_600_000_000  # 2026-11-29 07:00:00 UTC
BOOT_A = "a1" * 16
BOOT_B = "b2" * 16
LINE_MAX = 48 * 1024


@dataclass(frozen=True)
class E:
    host: str
    unit: str
    ident: str
    pid: int | None
    message: bytes
    boot: str = BOOT_A
    line_break: str | None = None


def _entries() -> list[E]:
    p = ("prefill-0", "sglang-prefill.service", "python3", 2001)
    d = ("decode-0", "sglang-decode.service", "python3", 3001)
    long_split = b"S" * LINE_MAX
    return [
        E(*p, b"[2026-11-29 07:00:00 TP0] Prefill batch, #new-seq: 1, #new-token: 896"),
        E(*d, b"forensics:checksum side=dst room=7301934425522180813 head=ab tail=cd"),
        E(*d, b'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom'),
        E(*d, b"bad bytes \xff\xfe in a message"),
        E(*d, b"L" * 70_000),
        E(*d, b'tab\there and a quote " and = signs'),
        E(*d, b"    leading spaces kept"),
        E(*d, b"ident without pid"),  # pid dropped below
        E(*d, b"<script>alert(1)</script> unicode \xc3\xa9\xe2\x9c\x93"),
        E(*d, long_split, line_break="line-max"),
        E(*d, b"tail of the split line"),
        E(*d, b"after the reboot", boot=BOOT_B),
        E(*p, b"empty next"),
        E(*p, b""),
        E(*p, b"last"),
    ]


ENTRIES = _entries()
NO_PID = 7  # index of the entry written without _PID


def ts_of(i: int) -> int:
    return T0 + i * 1_000_123  # distinct seconds, and microseconds that matter


def mono_of(i: int) -> int:
    return 5_000_000 + i * 1_000_000


def export_stream(indices: range | None = None) -> bytes:
    out = bytearray()
    for i, e in enumerate(ENTRIES):
        if indices is not None and i not in indices:
            continue
        fields: list[tuple[str, str | bytes | int]] = [
            ("__REALTIME_TIMESTAMP", ts_of(i)),
            ("__MONOTONIC_TIMESTAMP", mono_of(i)),
            ("_BOOT_ID", e.boot),
            ("_HOSTNAME", e.host),
            ("_SYSTEMD_UNIT", e.unit),
            ("SYSLOG_IDENTIFIER", e.ident),
            ("_TRANSPORT", "stdout"),
            ("PRIORITY", 6),
            ("MESSAGE", e.message),
            ("CODE_FUNC", "step"),
        ]
        if i != NO_PID and e.pid is not None:
            fields.append(("_PID", e.pid))
        if e.line_break:
            fields.append(("_LINE_BREAK", e.line_break))
        out += export_entry(fields)
    return bytes(out)


@dataclass(frozen=True)
class Expected:
    """An entry as a reader must yield it (message after LineMax rejoin)."""

    host: str
    unit: str
    ident: str
    pid: int | None
    ts_us: int
    mono_us: int
    boot: str
    message: bytes


def expected() -> list[Expected]:
    out = []
    skip = False
    for i, e in enumerate(ENTRIES):
        if skip:
            skip = False
            continue
        msg = e.message
        if e.line_break:
            msg += ENTRIES[i + 1].message
            skip = True
        pid = None if i == NO_PID else e.pid
        out.append(Expected(e.host, e.unit, e.ident, pid, ts_of(i), mono_of(i), e.boot, msg))
    return out


TEXT_RENDERINGS = [
    "short",
    "short-iso",
    "short-iso-precise",
    "short-precise",
    "short-full",
    "short-unix",
    "short-monotonic",
    "with-unit",
    "cat",
]
STRUCTURED_RENDERINGS = ["json", "json-seq", "export"]


def build(root: Path) -> dict[str, Path]:
    """Every rendering of the corpus, plus the .journal file itself under "journal"."""
    root.mkdir(parents=True, exist_ok=True)
    src = root / "corpus.export"
    src.write_bytes(export_stream())
    journals = write_journal(src, root / "journal" / "corpus.journal")
    out: dict[str, Path] = {"journal": journals[0]}
    for fmt in TEXT_RENDERINGS + STRUCTURED_RENDERINGS:
        out[fmt] = render(journals, fmt, root / f"corpus.{fmt}")
    out["json-noall"] = render(journals, "json", root / "corpus.json-noall", all_fields=False)
    out["short-noall"] = render(
        journals, "short-iso", root / "corpus.short-noall", all_fields=False
    )
    return out
