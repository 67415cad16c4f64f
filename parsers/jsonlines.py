"""The JSON-lines logs pd-forensics reads, one declaration each (lnav's format files are
the model): a file is the first declaration whose keys its first line holds, in the order
below. A new JSON-lines format is one row here and one test.

journald's `json` rendering is a row too: a line with none of its fields is never stored
as a journal entry with an empty message; a JSON line no other row takes is a generic
JSON log, its time, level and message found among the common keys."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from .results import JOURNAL_KEYS


@dataclass(frozen=True)
class JsonLines:
    name: str
    doc: str
    # each group: one of its keys is in the first line (all groups must hold)
    needs: tuple[tuple[str, ...], ...]
    time: tuple[str, ...] = ()  # where the time may be, first found wins
    level: tuple[str, ...] = ()
    message: tuple[str, ...] = ()
    quiet: tuple[str, ...] = ()  # kept in `fields`, left out of the readable line
    # a structured record: stored as the line itself (its patterns read it by JSON path),
    # timed by its `time` key in these units a second (1000: epoch milliseconds)
    record: bool = False
    per_second: int = 1

    def holds(self, obj: dict) -> bool:
        """Whether an object has this declaration's keys (one of each group)."""
        return all(any(k in obj for k in group) for group in self.needs)

    def message_key(self, obj: dict) -> str | None:
        return next((k for k in self.message if isinstance(obj.get(k), str)), None)


DECLARED = (
    JsonLines("docker-json", "docker's json-file log (`{\"log\": …, \"stream\": …, \"time\": …}`)",
              (("log",), ("stream", "time"))),
    JsonLines("sglang-metrics", "SGLang's --export-metrics-to-file records",
              (("request_parameters",),)),
    JsonLines("dynamo-request-trace", "Dynamo's request trace (DYN_REQUEST_TRACE: "
              "dynamo.request.trace.v1 records, request_end and tool rows; gzip segments too)",
              (("schema",), ("event_type",), ("event_time_unix_ms",)),
              time=("event_time_unix_ms",), record=True, per_second=1000),
    JsonLines("dynamo-jsonl", "Dynamo's JSONL (DYN_LOGGING_JSONL): time, level, target, message",
              (("time",), ("level",), ("message",), ("target", "span_name"))),
    JsonLines("zap", "zap's JSON (Go: llm-d's EPP and routing sidecar): level, ts, msg, caller",
              (("level",), ("ts",), ("msg",)), time=("ts",), level=("level",),
              message=("msg",), quiet=("caller", "logger", "stacktrace")),
    JsonLines("json", "journalctl -o json: a journal entry a line",
              (tuple(sorted(JOURNAL_KEYS)),)),
    JsonLines("json-log", "any other JSON log: time, level and message among the common keys",
              (), time=("time", "ts", "timestamp", "@timestamp", "asctime", "datetime"),
              level=("level", "severity", "levelname", "lvl", "log.level"),
              message=("msg", "message", "event", "log", "text"),
              quiet=("caller", "logger", "name", "filename", "lineno", "funcName")),
)  # fmt: skip
BY_NAME = {d.name: d for d in DECLARED}


def sniff_json_lines(head: bytes) -> str | None:
    """The declaration whose keys the first line holds, or None (not one JSON object a
    line: `json-pretty`, a JSON sequence, text)."""
    first = head.lstrip().split(b"\n", 1)[0].strip()
    if not first.startswith(b"{"):
        return None
    try:
        obj = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    for d in DECLARED:
        if d.holds(obj):
            return d.name
    return None


# journald's PRIORITY of the level words these logs write
LEVELS = {"ERROR": 3, "ERR": 3, "FATAL": 2, "CRITICAL": 2, "PANIC": 2, "DPANIC": 2,
          "WARN": 4, "WARNING": 4, "INFO": 6, "DEBUG": 7, "TRACE": 7}  # fmt: skip
# Dynamo's JSONL (DYN_LOGGING_JSONL / DYN_LOGGING_CONSOLE_FORMAT=jsonl) is stored as its
# readable line (`TIME LEVEL span{k=v …}: target: message`): the same text in either
# format, the same template. Source locations stay in `fields` only.
_DYNAMO_LINE_KEYS = ("time", "level", "target", "message", "span_name", "file", "line",
                     "log.file", "log.line", "log.target")  # fmt: skip


def dynamo_readable(obj: dict) -> tuple[str, int | None]:
    """A Dynamo JSONL object's readable line and its journald PRIORITY."""
    spans = " ".join(f"{k}={v}" for k, v in obj.items() if k not in _DYNAMO_LINE_KEYS
                     and not isinstance(v, dict | list))  # fmt: skip
    head = f"{obj.get('span_name', '')}{{{spans}}}: " if spans else ""
    target = f"{obj['target']}: " if isinstance(obj.get("target"), str) else ""
    stamp = obj.get("time") if isinstance(obj.get("time"), str) else None
    lead = f"{stamp} {str(obj.get('level', '')).upper():>5} " if stamp else ""
    return f"{lead}{head}{target}{obj.get('message', '')}", LEVELS.get(
        str(obj.get("level", "")).upper()
    )


def declared_readable(d: JsonLines, obj: dict) -> tuple[str | None, int | None]:
    """A declared JSON log's readable line — its message, then its other plain values as
    key=value (what the value namer reads) — or None where it has no message; and its
    journald PRIORITY."""
    key = d.message_key(obj)
    msg = obj[key] if key else None
    used = {*d.time, *d.level, *d.quiet, *(k for k in d.message if obj.get(k) == msg)}
    rest = " ".join(f"{k}={v}" for k, v in obj.items() if k not in used
                    and isinstance(v, str | int | float) and not isinstance(v, bool))  # fmt: skip
    level = next((obj[k] for k in d.level if k in obj), None)
    text = None if msg is None else " ".join(filter(None, (msg, rest)))
    return text, LEVELS.get(str(level).upper())


def readable(line: str) -> str:
    """A JSON log line as pd-forensics stores its message (what the namer reads); any
    other line as it is."""
    fmt = sniff_json_lines(line.encode())
    if fmt not in ("dynamo-jsonl", "zap", "json-log"):
        return line
    obj = orjson.loads(line)
    if fmt == "dynamo-jsonl":
        return dynamo_readable(obj)[0]
    return declared_readable(BY_NAME[fmt], obj)[0] or line
