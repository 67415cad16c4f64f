"""`forensics ingest` with record parsing switched off: what storing the entries alone
costs in this design (issue 12's "entries alone" row; not a mode of the command).

    python3 bench/entries_alone.py FILE DB

Everything else is as `forensics ingest FILE --db DB` does it (sha256, quarantine, rejoin,
dedupe keys, shards, registration, the answers' stored rows), in one process.
"""

from __future__ import annotations

import sys

from forensics.store import ingest, records, stage


class _NoRecords(records.RecordSink):
    def submit(self, batch) -> None:  # the batch's entries are stored; its records not read
        pass


def main(path: str, db: str) -> None:
    stage.RecordSink = _NoRecords  # type: ignore[misc]
    result = ingest.ingest([path], db)
    print(sum(s.entries for s in result.sources))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
