"""What a reader knows about its input and what it reports back besides entries."""

from __future__ import annotations

from dataclasses import dataclass, field

QUARANTINE_TEXT_MAX = 4096  # raw text kept per quarantined line; enough to see why
MAX_RECORD_BYTES = 64 << 20  # a line or record held at most; a trace's request is < 4 MB


def too_long(size: int, limit: int = MAX_RECORD_BYTES) -> str:
    """The reason for a record past the bound."""
    return f"a record of {size:,} bytes, over the {limit >> 20} MB one record may hold"


@dataclass
class Quarantined:
    line: int
    reason: str
    raw: str


@dataclass
class ReadContext:
    """Per-source options in, notes and quarantined lines out."""

    name: str
    year: int | None = None  # --year: for renderings without one (short, short-precise)
    host: str | None = None  # --host: for renderings without one (cat)
    # --host-alias: a trace's host → the journal's name for it
    aliases: dict[str, str] = field(default_factory=dict)
    mtime: float | None = None  # file time, a fallback for the year
    # whether the file's name may name its host without --host (formats.py's rows say)
    host_in_name: bool = True
    host_guessed: bool = False  # the reader took the host from the file's name
    notes: list[str] = field(default_factory=list)
    quarantine: list[Quarantined] = field(default_factory=list)
    # things a reader keeps but says with a count (ids of a wrong length): what → how many
    tallies: dict[str, int] = field(default_factory=dict)
    markers: int = 0  # journalctl's own "-- Boot … --" style lines, consumed
    lines: int = 0  # input lines (text) or export lines seen

    def reject(self, line: int, reason: str, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        self.quarantine.append(Quarantined(line, reason, raw[:QUARANTINE_TEXT_MAX]))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def tally(self, what: str, n: int = 1) -> None:
        """Count `n` of `what` ("spans ending before they start, kept"): said once, as a
        note with the total, when the input is read (`say_tallies`)."""
        if n:
            self.tallies[what] = self.tallies.get(what, 0) + n

    def say_tallies(self) -> None:
        for what, n in self.tallies.items():
            self.note(f"{n:,} × {what}")
        self.tallies.clear()
