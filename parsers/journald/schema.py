"""The one shape every reader yields: a journal entry with journald's raw names renamed once."""

from __future__ import annotations

import orjson
import pyarrow as pa

from ..pyvalues import table

ENTRY_SCHEMA = pa.schema(
    [
        ("entry_no", pa.int64()),  # 0-based order within the source
        ("ts_us", pa.int64()),  # realtime, µs since the epoch, UTC
        ("mono_us", pa.int64()),  # monotonic µs, meaningful with boot_id
        ("boot_id", pa.string()),
        ("host", pa.string()),
        ("unit", pa.string()),
        ("ident", pa.string()),  # SYSLOG_IDENTIFIER (or _COMM)
        ("pid", pa.int64()),
        ("priority", pa.int8()),
        ("message", pa.large_string()),  # invalid UTF-8 shows as U+FFFD here …
        ("message_raw", pa.large_binary()),  # … and the exact bytes are kept here
        ("cursor", pa.string()),
        ("line_first", pa.int64()),  # span of the entry in the rendered input, 1-based
        ("line_last", pa.int64()),
        ("truncated", pa.bool_()),  # journalctl replaced the value (json null, "[… blob data]")
        ("invalid_utf8", pa.bool_()),
        ("line_break", pa.string()),  # _LINE_BREAK: why journald split a stdout line
        ("fields", pa.large_string()),  # every other field, JSON object (lists when repeated)
    ]
)
COLUMNS = ENTRY_SCHEMA.names

# Raw journald field -> entry column. Everything downstream speaks the right-hand names.
FIELD_MAP = {
    "__REALTIME_TIMESTAMP": "ts_us",
    "__MONOTONIC_TIMESTAMP": "mono_us",
    "_BOOT_ID": "boot_id",
    "_HOSTNAME": "host",
    "_SYSTEMD_UNIT": "unit",
    "SYSLOG_IDENTIFIER": "ident",
    "_PID": "pid",
    "PRIORITY": "priority",
    "MESSAGE": "message",
    "__CURSOR": "cursor",
    "_LINE_BREAK": "line_break",
}
INT_COLUMNS = {"ts_us", "mono_us", "pid", "priority"}
# What each number may be; anything else is kept in `fields` as `invalid_<column>`, never
# stored where it would overflow a column or make a date no tool can print.
TS_MAX_US = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
INT_RANGE = {
    "ts_us": (0, TS_MAX_US),
    "mono_us": (0, (1 << 63) - 1),
    "pid": (0, (1 << 63) - 1),
    "priority": (0, 7),
}


def decode_text(raw: bytes) -> tuple[str, bool]:
    """Text for a value, and whether it was valid UTF-8."""
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace"), False


def extra_value(raw: bytes) -> str | list[int]:
    """A field other than the mapped ones, for the `fields` JSON: text when it is UTF-8,
    else its bytes as a list of numbers (as `journalctl -o json` writes them)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


class RowBuilder:
    """Collects entries field by field for the row-wise readers (json, export)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {c: [] for c in COLUMNS}
        self.n = 0

    def add(
        self,
        entry_no: int,
        values: dict[str, object],
        extra: dict[str, object] | None,
        line_first: int,
        line_last: int,
    ) -> None:
        """`values` holds column -> str (or bytes for message) as read; converts here."""
        cols = self.cols
        truncated = bool(values.pop("_truncated", False))
        msg = values.get("message")
        invalid = False
        raw = None
        if isinstance(msg, bytes):
            text, ok = decode_text(msg)
            if not ok:
                invalid, raw = True, msg
            msg = text
        for c in ("boot_id", "host", "unit", "ident", "cursor", "line_break"):
            v = values.get(c)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            cols[c].append(v)
        for c in INT_COLUMNS:
            v = values.get(c)
            if v is not None:
                try:
                    v = int(v)
                    lo, hi = INT_RANGE[c]
                    if not lo <= v <= hi:
                        raise ValueError(v)
                except (TypeError, ValueError):
                    # Keep what could not be read as a number rather than drop it.
                    extra = dict(extra or {})
                    extra[f"invalid_{c}"] = (
                        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                    )
                    v = None
            cols[c].append(v)
        if "ident" not in values or values.get("ident") is None:
            comm = (extra or {}).get("_COMM")
            if isinstance(comm, str):
                cols["ident"][-1] = comm
        cols["entry_no"].append(entry_no)
        cols["message"].append(msg)
        cols["message_raw"].append(raw)
        cols["line_first"].append(line_first)
        cols["line_last"].append(line_last)
        cols["truncated"].append(truncated)
        cols["invalid_utf8"].append(invalid)
        cols["fields"].append(orjson.dumps(extra).decode() if extra else None)
        self.n += 1

    def table(self) -> pa.Table:
        t = table(self.cols, ENTRY_SCHEMA)  # not from_pydict: it imports pandas
        self.cols = {c: [] for c in COLUMNS}
        self.n = 0
        return t
