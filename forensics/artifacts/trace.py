"""`forensics trace`: the incident as a Perfetto trace, optionally beside a profiler trace."""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..analyses.runs import Runs
from ..errors import ForensicsError
from ..outputs import replacing
from ..scope import Db, scoped
from . import timeline as tl_mod
from .trace_files import TRACE_NAME, profile_origin, write_archive, write_json, write_proto

FORMATS = ("proto", "json")


@dataclass
class TraceResult:
    out: Path
    format: str
    hosts: list[str]
    slices: int
    instants: int
    counters: int
    flows: int
    reference: str | None
    shifts_us: dict[str, int]
    unshifted: list[str]
    notes: list[str]
    seconds: float
    bytes: int
    profile: str | None = None
    profile_host: str | None = None

    def as_dict(self) -> dict:
        return self.__dict__ | {"out": str(self.out)}

    def sentences(self) -> list[str]:
        what = (f"{len(self.hosts)} hosts, {self.slices:,} slices, {self.instants:,} instants, "
                f"{self.counters:,} counter values, {self.flows:,} transfer flows")  # fmt: skip
        out = [f"wrote {self.out} ({self.format}; {what}; {self.bytes / 2**20:,.1f} MB, "
               f"{self.seconds:.1f} s)"]  # fmt: skip
        if self.reference:
            shifts = ", ".join(f"{h} {s / 1000:+.3f} ms" for h, s in self.shifts_us.items()
                               if h != self.reference)  # fmt: skip
            out.append(
                f"clock: {self.reference}'s" + (f"; shifted onto it: {shifts}" if shifts else "")
            )
        out += self.notes
        if self.profile:
            out.append(
                f"the profile {self.profile} ({self.profile_host}'s clock) is placed beside it: "
                "open the archive in ui.perfetto.dev (Open trace file) to see both"
            )
        return out


def trace(
    db: Db = None,
    out: str | os.PathLike = "incident.pftrace",
    run: Runs = None,
    format: str = "proto",
    reference: str | None = None,
    max_events: int = tl_mod.MAX_EVENTS,
    profile: str | os.PathLike | None = None,
    profile_host: str | None = None,
    scrub: bool = False,
) -> TraceResult:
    """Write the incident's timeline; with `profile` (a torch profiler / Kineto JSON trace
    recorded on `profile_host`, default the reference host), `out` is a .tar or .zip
    holding both and the perfetto_manifest.json that puts them on one clock. `scrub`:
    secrets out of every value in it (on a connection given, its tables stay scrubbed)."""
    out = _checked(format, max_events, Path(out), profile)
    t0 = time.perf_counter()
    with scoped(db, run) as s:
        if scrub:
            from ..scrubbing import shadow

            shadow(s.con, keep=True)
            s.changed()
        tl = tl_mod.build(s, reference, max_events)
    host = _write(tl, out, format, Path(profile) if profile else None, profile_host)
    instants = sum(s.dur_us == 0 for s in tl.slices)
    return TraceResult(
        out=out, format=format, hosts=tl.hosts, slices=len(tl.slices) - instants,
        instants=instants, counters=len(tl.counters), flows=tl.flows,
        reference=tl.clocks.reference, shifts_us=tl.clocks.shifts_us,
        unshifted=tl.clocks.unshifted, notes=tl.notes, seconds=time.perf_counter() - t0,
        bytes=out.stat().st_size, profile=str(profile) if profile else None,
        profile_host=host,
    )  # fmt: skip


def _checked(format: str, max_events: int, out: Path, profile) -> Path:
    if format not in FORMATS:
        raise ForensicsError(f"unknown trace format {format!r}; choose one of {', '.join(FORMATS)}")
    if max_events < 1:
        raise ForensicsError("--max-events must be at least 1")
    if profile is not None and out.suffix not in (".tar", ".zip"):
        raise ForensicsError(
            f"with a profile the output is an archive: name it .tar or .zip, not {out.name}"
        )
    return out


def _write(
    tl: tl_mod.Timeline, out: Path, format: str, profile: Path | None, profile_host: str | None
) -> str | None:
    """The trace to `out`, or with a profile the archive of both: the profile's host."""
    writer = write_proto if format == "proto" else write_json
    with replacing(out) as tmp:
        if profile is None:
            with open(tmp, "wb") as fh:
                writer(tl, fh)
            return None
        buf = io.BytesIO()
        writer(tl, buf)
        name = TRACE_NAME if format == "proto" else "incident.json"
        _, named = profile_origin(profile)
        # the host the profile says it ran on, where the incident has it
        host = profile_host or (named if named in tl.hosts else tl.clocks.reference)
        if host is not None and host not in tl.hosts and host not in tl.clocks.shifts_us:
            raise ForensicsError(f"no host {host!r} in the trace; hosts: {', '.join(tl.hosts)}")
        write_archive(tmp, buf.getvalue(), name, profile, tl.clocks.shift(host),
                      out.suffix == ".zip")  # fmt: skip
        return host
