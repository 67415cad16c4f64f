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


DECLARED = (
    JsonLines("docker-json", "docker's json-file log (`{\"log\": …, \"stream\": …, \"time\": …}`)",
              (("log",), ("stream", "time"))),
    JsonLines("sglang-metrics", "SGLang's --export-metrics-to-file records",
              (("request_parameters",),)),
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
        if all(any(k in obj for k in group) for group in d.needs):
            return d.name
    return None
