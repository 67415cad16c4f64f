"""Records as the lines docs/log-contract.md defines, and where they go (logging)."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable

LOGGER = "forensics.probes"
ENV = "FORENSICS_PROBES"  # "0" turns every probe into a no-op


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


_QUOTED = re.compile(r'[\s"]')  # \s: str.isspace's characters (both use Py_UNICODE_ISSPACE)


def value(v: object) -> str:
    """A value as the contract writes it: a bare token, or a quoted string."""
    if type(v) is int:  # most of a canary's values; the writer thread's time
        return str(v)
    s = str(v).lower() if isinstance(v, bool) else str(v)
    if s == "" or _QUOTED.search(s):
        return json.dumps(s)
    return s


def pages(ids: Iterable[int], ordered: bool = False) -> str:
    """A page list with ranges, always bracketed (a bare number would be a count).
    `ordered`: the ids are already sorted and distinct (the canary's writer thread)."""
    xs = list(ids) if ordered else sorted({int(x) for x in ids})
    if not xs:
        return "[]"
    out: list[str] = []
    start = prev = xs[0]
    for p in xs[1:]:
        if p != prev + 1:
            out.append(f"{start}-{prev}" if prev > start else str(start))
            start = p
        prev = p
    out.append(f"{start}-{prev}" if prev > start else str(start))
    return "[" + ",".join(out) + "]"


def record(kind: str, fields: dict[str, object]) -> str:
    body = " ".join(f"{k}={value(v)}" for k, v in fields.items() if v is not None)
    return f"forensics:{kind} {body}"


def emit(line: str, logger: logging.Logger | bool | None) -> None:
    if logger is False:
        return
    target = logging.getLogger(LOGGER) if logger in (None, True) else logger
    target.info(line)  # type: ignore[union-attr]
