"""Small shared helpers for tests: run the CLI, count what the database holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from forensics.store import connect_read_only


def cli(
    *args: str, stdin: bytes | None = None, env: dict | None = None, **kw
) -> subprocess.CompletedProcess:
    # the runner's terminal width stays out (pytest-xdist's workers carry COLUMNS=80): a
    # test that wants a width says so
    inherited = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return subprocess.run(
        [sys.executable, "-m", "forensics", *args],
        input=stdin,
        capture_output=True,
        env={**inherited, **(env or {})},
        **kw,
    )


def counts(db: Path) -> tuple[int, int, int]:
    """(sources, entries, quarantined) in the database."""
    con = connect_read_only(db)
    try:
        return tuple(  # type: ignore[return-value]
            con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("sources", "entries", "quarantine")
        )
    finally:
        con.close()


def messages(db: Path) -> list[str]:
    con = connect_read_only(db)
    try:
        return [
            r[0]
            for r in con.execute(
                "SELECT message FROM entries ORDER BY source_id, entry_no"
            ).fetchall()
        ]
    finally:
        con.close()


def plain(db: Path, read_only: bool = True):
    """The database as a plain DuckDB client opens it (README: the views name their shards
    relative to the shard folder)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=read_only)
    shards = Path(db).resolve().with_suffix(".shards")
    con.execute(f"SET file_search_path = '{shards}'")
    return con


def legacy_copy(db: Path, out: Path) -> Path:
    """`db` as pd-forensics wrote it at schema 6, every row in the .duckdb file (what
    `forensics upgrade` reads)."""
    from forensics.store.legacy import write_legacy

    return write_legacy(db, out)


def held_at(point: str, *args: str) -> tuple[subprocess.Popen, int]:
    """`forensics ARGS` run until it reaches `point` (forensics/store/points.py), held
    there: the process and the pipe end that lets it go on."""
    reached_r, reached_w = os.pipe()
    resume_r, resume_w = os.pipe()
    env = {**os.environ, "FORENSICS_PAUSE_AT": point, "FORENSICS_PAUSE_FD": str(reached_w),
           "FORENSICS_RESUME_FD": str(resume_r)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "forensics", *args], env=env,
                            pass_fds=(reached_w, resume_r), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    os.close(reached_w)
    os.close(resume_r)
    with os.fdopen(reached_r, "rb") as fh:
        assert fh.readline() == f"{point}\n".encode(), proc.communicate()
    return proc, resume_w
