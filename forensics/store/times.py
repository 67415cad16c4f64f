"""Entries without a time of their own: a traceback's lines in `journalctl -o cat`, the
unprefixed lines of a program's stdout. Each takes the time of the timed entry before it
in the same source, and says so (`entries.ts_inherited`); those before a source's first
time keep none, and the time-based analyses leave them out and count them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..plural import counted


class InheritedTimes:
    """Carries the last time across one source's batches, in entry order. `own`: the
    format gives every entry journald's own time, so one missing is damage (an invalid
    `__REALTIME_TIMESTAMP`): it stays missing, never filled."""

    def __init__(self, own: bool = False) -> None:
        self.own = own
        self.last: int | None = None
        self.inherited = 0  # entries that took the time before them
        self.untimed = 0  # entries before the source's first time: no time at all

    def apply(self, batch: pa.Table) -> pa.Table:
        """The batch with every missing time filled from the entry before it, and the
        `ts_inherited` column saying which were."""
        # Arrow's kernels alone: an array made from numpy imports pandas where installed
        ts = batch["ts_us"]
        missing = pc.is_null(ts)
        if ts.null_count == 0 or self.own:
            if len(ts):
                self.last = ts[-1].as_py()
            return batch.append_column("ts_inherited", missing)
        filled = pc.fill_null_forward(ts)
        if self.last is not None:
            filled = pc.fill_null(filled, self.last)
        inherited = pc.and_(missing, pc.is_valid(filled))
        self.inherited += pc.sum(inherited).as_py() or 0
        self.untimed += filled.null_count
        if filled.null_count < len(filled):
            self.last = filled[-1].as_py()
        at = batch.schema.get_field_index("ts_us")
        batch = batch.set_column(at, "ts_us", filled)
        return batch.append_column("ts_inherited", inherited)

    def notes(self) -> list[str]:
        """What the source's notes say of its untimed entries."""
        out = []
        if self.inherited:
            one = self.inherited == 1
            out.append(f"{counted(self.inherited, 'entry', 'entries')} without a time of "
                       f"{'its' if one else 'their'} own took the time of the entry before "
                       f"{'it' if one else 'them'} (entries.ts_inherited)")  # fmt: skip
        if self.untimed:
            one = self.untimed == 1
            out.append(f"{counted(self.untimed, 'entry', 'entries')} "
                       f"{'has' if one else 'have'} no time (none before "
                       f"{'it' if one else 'them'} in the source had one): the time-based "
                       f"analyses leave {'it' if one else 'them'} out")  # fmt: skip
        return out
