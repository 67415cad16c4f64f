"""Every input form pd-forensics reads, declared once (lnav's format files are the model):
FAMILIES in the order a stream is sniffed, each with the sniffer that tells its formats
apart and the reader that reads them; FORMATS one row a format, in that order. `--format`'s
list, `ingest --help` and docs/details.md's table are generated from these rows. A new
JSON-lines format is one row of jsonlines.py (its family reads it by its declaration)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow as pa

from .flight_recorder import sniff as sniff_flight_recorder
from .journald import ReadContext, read_entries, sniff
from .jsonlines import DECLARED, sniff_json_lines
from .otlp import sniff as sniff_otlp
from .plain import PLAIN_FORMATS, read_plain, sniff_collector, sniff_program
from .results import RESULT_FORMATS, sniff_results

Reader = Callable[[BinaryIO, str, ReadContext], Iterator[pa.Table]]
# 100 MB of spans: 1.29 GB peak weighed as text (64 MB groups), 0.76 GB at a quarter the
# group (bench/README.md)
RECORD_WEIGHT = 4


@dataclass(frozen=True)
class Family:
    name: str
    doc: str
    sniff: Callable[[bytes], str | None]  # the format of a head, or None: not this family
    read: Reader | None  # None: not a log (results are read apart)


@dataclass(frozen=True)
class Format:
    name: str
    family: str
    doc: str
    # what record parsing holds a byte of it at, against a log line's: a structured
    # record a line is decoded whole into the struct its JSON paths name
    weight: int = 1
    # whether the file's name is its host's, where --host is not given (a program's log
    # named decode-0.log); a dump's or a trace's names a rank, a segment, a process
    host_in_name: bool = True


def _journal(head: bytes) -> str | None:
    """A journalctl rendering or the binary journal; `cat` (nothing fits) is the program
    family's to tell from a program's own log."""
    found = sniff(head)
    return None if found == "cat" else found


def _program(head: bytes) -> str:
    return sniff_program(head) or "cat"


def _log(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    return read_plain(stream, fmt, ctx) if fmt in PLAIN_FORMATS else read_entries(stream, fmt, ctx)


FAMILIES = (
    Family("flight-recorder", "PyTorch Flight Recorder dumps (a pickle a rank, read as data "
           "only: parsers/flight_recorder.py)", sniff_flight_recorder, read_plain),
    Family("otlp", "OpenTelemetry traces as a collector's file exporter writes them, a span an "
           "entry (parsers/otlp.py)", sniff_otlp, read_plain),
    Family("results", "the reproducer's judged replies (JSON lines or CSV)", sniff_results, None),
    Family("json-lines", "JSON-lines logs, told apart by the keys of their first line "
           "(parsers/jsonlines.py)", sniff_json_lines, _log),
    Family("collector", "a log collector's RFC 3339 prefix ending in Z (docker, kubectl)",
           sniff_collector, read_plain),
    Family("journal", "journalctl's renderings, the most specific first; the binary journal",
           _journal, read_entries),
    Family("program", "a program's own log: SGLang's (or Python logging's) time prefix, "
           "else text without times (`cat`)", _program, _log),
)  # fmt: skip


def _formats() -> tuple[Format, ...]:
    """The rows, in the order a stream is sniffed (journald/sniff.py's order within the
    journal family: the binary journal, then by the first byte, then the most specific
    text rendering first)."""
    rows = [
        Format(
            "flight-recorder",
            "flight-recorder",
            "a PyTorch Flight Recorder dump (nccl_trace_rank_N): each rank's last collectives",
            host_in_name=False,
        )
    ]
    rows += [
        Format("otlp-json", "otlp", "OTLP JSON: an ExportTraceServiceRequest a line (the "
               "collector's file exporter), or one document", RECORD_WEIGHT, False),
        Format("otlp-logs", "otlp", "OTLP JSON logs: an ExportLogsServiceRequest a line, a log "
               "record an entry; Dynamo's request trace from its otel sink read as the trace "
               "(parsers/otlp_logs.py)", RECORD_WEIGHT, False),
        Format("otlp-proto", "otlp", "OTLP protobuf: length-prefixed requests (the file "
               "exporter's proto format), or one request; needs the otel extra",
               RECORD_WEIGHT, False),
    ]  # fmt: skip
    # a record file (Dynamo's request trace) is named after its segment, not a host
    rows += [Format(d.name, "json-lines", d.doc, RECORD_WEIGHT if d.record else 1,
                    not d.record) for d in DECLARED]  # fmt: skip
    rows += [
        Format("timestamped", "collector", "docker logs / kubectl logs --timestamps"),
        Format("journal", "journal", "a binary .journal file (read through journalctl --file)"),
        Format("json-seq", "journal", "journalctl -o json-seq (RFC 7464 records)"),
        Format("export", "journal", "journalctl -o export (the export stream, binary fields)"),
        Format("short-iso-precise", "journal", "journalctl -o short-iso-precise (µs, a zone)"),
        Format("short-iso", "journal", "journalctl -o short-iso (whole seconds, a zone)"),
        Format("short-full", "journal", "journalctl -o short-full (weekday, date, zone)"),
        Format("with-unit", "journal", "journalctl -o with-unit (short-full, the unit as "
               "identifier)"),
        Format("short-precise", "journal", "journalctl -o short-precise (no year: --year, "
               "else the file time)"),
        Format("short", "journal", "journalctl -o short (no year, whole seconds)"),
        Format("short-unix", "journal", "journalctl -o short-unix (epoch seconds)"),
        Format("short-monotonic", "journal", "journalctl -o short-monotonic (boot-relative, "
               "anchored where it can be)"),
        Format("sglang", "program", "SGLang's stdout or log file: its `[YYYY-MM-DD HH:MM:SS "
               "TP0]` prefix, Python logging's, glog's, vLLM's, UCX's epoch stamps"),
        Format("cat", "program", "journalctl -o cat, or any text without times (--host "
               "names its host)"),
    ]  # fmt: skip
    return tuple(rows)


FORMATS_TABLE = _formats()
BY_NAME = {f.name: f for f in FORMATS_TABLE}
FAMILY = {f.name: f for f in FAMILIES}
FORMATS = [f.name for f in FORMATS_TABLE]  # what --format takes (results are sniffed)


def host_in_name(fmt: str) -> bool:
    """Whether a file of this format takes its host from its name (without --host)."""
    return BY_NAME[fmt].host_in_name if fmt in BY_NAME else True


def weight(fmt: str) -> int:
    """What record parsing holds a byte of this format at (a log line's: 1)."""
    return BY_NAME[fmt].weight if fmt in BY_NAME else 1


def sniff_input(head: bytes) -> str:
    """The form of a stream starting with `head`: the first family whose sniffer knows
    it (raises UnknownFormat, NotResults)."""
    for family in FAMILIES:
        if (found := family.sniff(head)) is not None:
            return found
    raise AssertionError("the program family always answers")  # pragma: no cover


def read_stream(stream: BinaryIO, fmt: str, ctx: ReadContext) -> Iterator[pa.Table]:
    """Entries of a log stream in a known form (not "journal", not results)."""
    family = FAMILY[BY_NAME[fmt].family] if fmt in BY_NAME else FAMILY["journal"]
    assert family.read is not None, fmt
    ctx.host_in_name = host_in_name(fmt)
    return family.read(stream, fmt, ctx)


def formats_markdown() -> str:
    """Every format as a Markdown table, in the order they are sniffed (docs/details.md)."""
    rows = ["| format | family | what it is |", "|---|---|---|"]
    rows += [f"| `{f.name}` | {f.family} | {f.doc} |" for f in FORMATS_TABLE]
    return "\n".join(rows) + "\n"


def json_formats_markdown() -> str:
    """The JSON-lines formats as a Markdown table, in the order they are sniffed
    (docs/details.md carries it)."""
    rows = ["| format | what it is | its first line holds |", "|---|---|---|"]
    for d in DECLARED:
        needs = " and ".join("/".join(f"`{k}`" for k in group) for group in d.needs) or "—"
        rows.append(f"| `{d.name}` | {d.doc} | {needs} |")
    return "\n".join(rows) + "\n"


__all__ = ["FAMILIES", "FORMATS", "FORMATS_TABLE", "RESULT_FORMATS", "read_stream",
           "sniff_input"]  # fmt: skip
