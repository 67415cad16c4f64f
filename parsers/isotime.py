"""ISO 8601 / RFC 3339 times to µs since the epoch, for the readers that meet them."""

from __future__ import annotations

import datetime as dt

from .journald.schema import TS_MAX_US

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)


def iso_us(text: str) -> int:
    """µs since the epoch of `2026-09-20T14:03:12.123456789Z`, `… 14:03:12,123`, an offset
    or no zone (read as UTC); exact, fractions beyond µs dropped. ValueError when it is
    not such a time, or not between 1970 and 9999."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("not ISO 8601") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    us = (t - _EPOCH) // _US
    if not 0 <= us <= TS_MAX_US:
        raise ValueError("not a time between 1970 and 9999")
    return us
