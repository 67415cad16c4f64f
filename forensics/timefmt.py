"""µs timestamps as people read them."""

from __future__ import annotations

import datetime as dt


def iso_us(ts_us: int | None) -> str:
    if ts_us is None:
        return "-"
    t = dt.datetime.fromtimestamp(ts_us / 1e6, dt.UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def span(first: int | None, last: int | None) -> str:
    if first is None or last is None:
        return "no wall-clock times"
    secs = (last - first) / 1e6
    return f"{iso_us(first)} → {iso_us(last)} ({secs:,.1f} s)"
