"""Named points in a writer's work where a test holds it, to set two writers against each
other in a chosen order without guessing times.

`FORENSICS_PAUSE_AT=NAME` with `FORENSICS_PAUSE_FD` and `FORENSICS_RESUME_FD` (pipes the
process inherited): at NAME the process writes `NAME\\n` to the first and blocks until a
byte arrives on the second. Unset (always, outside tests), a point costs one lookup."""

from __future__ import annotations

import os

ENV = ("FORENSICS_PAUSE_AT", "FORENSICS_PAUSE_FD", "FORENSICS_RESUME_FD")
POINTS = (
    "ingest-start",  # inputs expanded, nothing read or opened for writing yet
    "catalog-opened",  # the catalog held for registration (made by this ingest or not)
    "source-moved-in",  # a staged source renamed into the shard folder, not committed
    "registered",  # every source registered, the stored answers not yet refreshed
    "committed",  # the catalog committed, the shard folder not yet marked
    "remove-unlisted",  # a removed source's rows unlisted, others' entries given back
    "relabel-rewritten",  # a relabelled source's files written anew, not committed
    "copy-catalog-copied",  # a copy's catalog written, its shard folder not yet
    "mv-catalog-moved",  # a move's catalog moved, its shard folder not yet
)


def reached(name: str) -> None:
    if os.environ.get(ENV[0]) != name:
        return
    os.write(int(os.environ[ENV[1]]), f"{name}\n".encode())
    os.read(int(os.environ[ENV[2]]), 1)
