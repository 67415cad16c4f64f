"""The shard folder beside a catalog: each source's rows as Parquet files of its own, the
views that read the registered ones, and the removal of files no catalog lists.

Layout: `incident.duckdb` (the catalog) and `incident.shards/source_id=N/<table>-<token>
.parquet`. The folder name is the rows' `source_id`: a source is registered by renaming
its staged folder, and a scan that filters on one source opens only its files. Paths are
stored relative to the shard folder, so the incident can be copied, moved or renamed
(catalog and folder together); forensics gives its own connections absolute paths, a
plain DuckDB client `SET file_search_path = '<the shard folder>'`. The shard folder may
be a link (shards on another disk); nothing inside it is followed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ..errors import ForensicsError
from ..parsers.tables import SHARDED
from .database import SHARD_SUFFIX
from .database import folder as folder  # re-exported: the shard folder of a catalog

if TYPE_CHECKING:  # pyarrow loads with the writers, not with every answer (0.02 s)
    import pyarrow as pa
    import pyarrow.parquet as pq

SUFFIX = SHARD_SUFFIX
STAGING = ".ingest-"  # a folder an ingest writes its sources into before registering them
LOCK = ".lock"  # held (flock) by the ingest that owns a staging folder while it runs
WRITER = ".writer"  # held (flock) by the writer that creates, registers or removes
# Row groups of about this many rows: a scan reads groups in parallel and skips them by
# their statistics; one group a 16 MB batch keeps the writer's memory flat.
ROW_GROUP_ROWS = 128 * 1024
COMPRESSION = "zstd"
META_VERSION = b"forensics.schema_version"
META_TABLE = b"forensics.table"


def _is_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _zero_length_nulls(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A list column whose null entries span no values: polars 1.35's left join leaves
    nulls of a non-zero length, which the cast to the stored type refused on the lowest
    dependency set (tests/test_records.py's grouped batches). if_else rebuilds such a
    column (only such a one), so its nulls come out empty
    (an array of nulls: a scalar made from Python imports pandas)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def spans(chunk: pa.Array) -> bool:  # a null entry over values: the rebuild is needed
        if not chunk.null_count:
            return False  # (arrow kernels only: numpy's view of a bool array imports pandas)
        offsets = chunk.offsets
        lengths = pc.subtract(offsets.slice(1), offsets.slice(0, len(offsets) - 1))
        return (pc.max(pc.filter(lengths, chunk.is_null())).as_py() or 0) > 0

    if not any(spans(c) for c in col.chunks):
        return col
    return pc.if_else(col.is_null(), pa.nulls(len(col), col.type), col)


def source_folder(root: Path, source_id: int) -> Path:
    return root / f"source_id={int(source_id)}"


def schema(table: str, version: int) -> pa.Schema:
    """A shard's schema: the declared columns but `source_id` (its folder's name), the
    schema version and the table in the file's metadata."""
    s = SHARDED[table].arrow(skip=("source_id",))
    return s.with_metadata({META_VERSION: str(version).encode(), META_TABLE: table.encode()})


class ShardWriter:
    """A staged source's files, written as batches arrive: each under a temporary name
    until closed, then renamed. A table may end with several files (rows read again after
    a rewrite go to one of their own)."""

    def __init__(self, where: Path, version: int) -> None:
        self.where = where
        self.version = version
        self.writers: dict[str, tuple[pq.ParquetWriter, Path, pa.Schema]] = {}
        self.files: dict[str, list[str]] = {}  # table -> closed file names in `where`
        self.written: dict[str, int] = {}  # table -> rows written
        self.keep = False  # a registered source's: old files stay until the commit

    def write(self, table: str, data: pa.Table) -> None:
        if not data.num_rows:
            return
        if table not in self.writers:
            s = schema(table, self.version)
            tmp = self.where / f"{table}-{uuid.uuid4().hex[:12]}.parquet.tmp"
            self.writers[table] = (_writer(tmp, s), tmp, s)
        w, _, s = self.writers[table]
        data = data.select(s.names)
        for i, f in enumerate(data.schema):
            if _is_list(f.type) and data.column(i).null_count:
                data = data.set_column(i, f.name, _zero_length_nulls(data.column(i)))
        w.write_table(data.cast(s), row_group_size=ROW_GROUP_ROWS)
        self.written[table] = self.written.get(table, 0) + data.num_rows

    def close(self) -> dict[str, list[str]]:
        for table, (w, tmp, _) in self.writers.items():
            w.close()
            final = tmp.with_suffix("")  # drop .tmp
            tmp.rename(final)
            self.files.setdefault(table, []).append(final.name)
        self.writers.clear()
        return self.files

    def abort(self) -> None:
        for w, tmp, _ in self.writers.values():
            w.close()
            tmp.unlink(missing_ok=True)
        self.writers.clear()

    def paths(self, table: str) -> list[Path]:
        return [self.where / f for f in self.files.get(table, [])]

    def replace(self, table: str, new: list[Path]) -> None:
        """A table's closed files rewritten: `new` (existing files) take their place."""
        for old in self.paths(table):
            if old not in new and not self.keep:
                old.unlink()
        self.files[table] = [p.name for p in new]


def _writer(path: Path, s: pa.Schema) -> pq.ParquetWriter:
    """Integers delta-encoded (entry numbers, lines and times ascend: on the benchmark
    journal's entries 21 % smaller and faster to write than dictionaries), the rest with
    dictionaries where they pay, all zstd (level 9: 7 % smaller at 4.6x the time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ints = [f.name for f in s if pa.types.is_integer(f.type) and f.name != "key"]
    return pq.ParquetWriter(
        path, s, compression=COMPRESSION,
        use_dictionary=[f.name for f in s if f.name not in ints and f.name != "key"],
        column_encoding=dict.fromkeys(ints, "DELTA_BINARY_PACKED"),
    )  # fmt: skip


def new_file(where: Path, table: str) -> Path:
    """A fresh shard file name (a rewrite writes a new file, never over one)."""
    return where / f"{table}-{uuid.uuid4().hex[:12]}.parquet"


def rows_in(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(path).metadata.num_rows


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def list_files(
    con: duckdb.DuckDBPyConnection, root: Path, source_id: int, table: str, files: list[Path]
) -> None:
    """Register shard files of one source's table (`root`: the shard folder) with their
    rows, bytes and sha256."""
    for f in files:
        con.execute("INSERT INTO shards VALUES (?, ?, ?, ?, ?, ?)",
                    [f.relative_to(root).as_posix(), source_id, table, rows_in(f),
                     f.stat().st_size, file_sha256(f)])  # fmt: skip


def registered(
    con: duckdb.DuckDBPyConnection, table: str | None = None, skip: frozenset = frozenset()
) -> list[str]:
    """The registered files (relative to the shard folder), in source order; `skip`:
    sources left out."""
    where = "WHERE table_name = ?" if table else ""
    return [r[0] for r in con.execute(
        f"SELECT path, source_id FROM shards {where} ORDER BY source_id, path",
        [table] if table else [],
    ).fetchall() if r[1] not in skip]  # fmt: skip


def install_table_views(
    con: duckdb.DuckDBPyConnection, root: Path, temp: bool = False, skip: frozenset = frozenset()
) -> None:
    """A view per sharded table over its registered files. In the file (temp=False) the
    paths are relative to the shard folder, for any client; a temporary view of this
    connection's gets them absolute (`root`: the shard folder). `skip`: sources left out
    (damaged ones, for the commands that work beside them)."""
    files: dict[str, list[str]] = {t: [] for t in SHARDED}
    for path, table, sid in con.execute(
        "SELECT path, table_name, source_id FROM shards ORDER BY source_id, path"
    ).fetchall():
        if table in files and sid not in skip:
            files[table].append(str(root / path) if temp else path)
    kind = "TEMP VIEW" if temp else "VIEW"
    for name, t in SHARDED.items():
        try:
            try:
                con.execute(f"CREATE OR REPLACE {kind} {name} AS {t.view(files[name])}")
            except duckdb.BinderException:
                # a column declared after every shard of this table was written: NULL
                present = {r[0] for r in con.execute(
                    f"DESCRIBE SELECT * FROM {t.scan(files[name])}").fetchall()}  # fmt: skip
                con.execute(f"CREATE OR REPLACE {kind} {name} AS "
                            f"{t.view(files[name], present)}")  # fmt: skip
        except duckdb.Error as exc:
            # perhaps a footer no reader parses (a flipped byte; DuckDB may not say which
            # file): the caller reads each file on its own (integrity.unreadable)
            raise Unreadable(name, [root / f for f in files[name]], exc) from exc


class Unreadable(Exception):
    """A table's view could not be made over these files: one may be damaged."""

    def __init__(self, table: str, files: list[Path], error: Exception) -> None:
        super().__init__(table)
        self.files, self.error = files, error


@contextmanager
def staging(root: Path) -> Iterator[Path]:
    """A folder for this ingest's staged sources, held (flock) while it runs, removed
    after. A killed ingest's folder loses its lock with the process: `sweep` removes it."""
    root.mkdir(parents=True, exist_ok=True)
    where = root / f"{STAGING}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    where.mkdir()
    fh = open(where / LOCK, "w")  # noqa: SIM115 (held for the whole block)
    fcntl.flock(fh, fcntl.LOCK_EX)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)
        fh.close()


def _abandoned(where: Path) -> bool:
    """A staging folder whose ingest is gone (its lock can be taken)."""
    try:
        fh = open(where / LOCK)  # noqa: SIM115
    except OSError:
        return True
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        fh.close()
    return True


@contextmanager
def writer_lock(
    root: Path, wait: float = 0.0, waiting: Callable[[], None] | None = None
) -> Iterator[None]:
    """The incident's writer lock (flock on the shard folder's WRITER file), held while a
    writer creates, registers into or removes the catalog: a failed first ingest removes
    the catalog it made without another writer committing into it between."""
    root.mkdir(parents=True, exist_ok=True)
    fh = open(root / WRITER, "a")  # noqa: SIM115 (held for the whole block)
    deadline, pause = time.monotonic() + wait, 0.05
    try:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    how = f" (waited {wait:g} s)" if wait else " (--wait SECONDS waits for it)"
                    raise ForensicsError(
                        f"{root.parent} is being written by another process{how}"
                    ) from None
                if waiting is not None:
                    waiting()
                    waiting = None
                time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
                pause = min(pause * 2, 1.0)
        if not _flock_enforced(root / WRITER):
            raise ForensicsError(
                f"{root} is on a file system that does not enforce flock (some NFS, SMB or "
                "sshfs mounts): another writer could not be kept out; put the incident on "
                "a local disk (the shard folder may be a link to one)"
            )
        yield
    finally:
        fh.close()


# Whether another process is kept out by our flock (asked once a folder a process).
_ENFORCED: dict[str, bool] = {}
_PROBE = (
    "import fcntl, sys\n"
    "f = open(sys.argv[1])\n"
    "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "except BlockingIOError:\n    sys.exit(0)\n"
    "sys.exit(3)\n"
)


def _flock_enforced(lock: Path) -> bool:
    """Held by this process, `lock` is tried by another (only another process tells: on
    a mount that emulates flock with POSIX locks, this process would take it again)."""
    key = str(lock.parent.resolve())
    if key not in _ENFORCED:
        import subprocess
        import sys

        proc = subprocess.run([sys.executable, "-S", "-c", _PROBE, str(lock)],
                              capture_output=True, timeout=60)  # fmt: skip
        _ENFORCED[key] = proc.returncode == 0
    return _ENFORCED[key]


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def sweep(root: Path, listed: set[str]) -> list[str]:
    """Remove what an earlier ingest left behind and no catalog lists: abandoned staging
    folders, and shard files (and folders) not registered. Run by a writer that holds the
    catalog; returns what it removed (relative to `root`, as `listed`). Nothing is followed: a link
    in the folder is removed as a link (its target untouched), and every delete goes
    through the folder's own descriptor, so a folder swapped for a link meanwhile is not
    entered."""
    removed: list[str] = []
    if not root.is_dir():
        return removed
    rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # the folder itself may be a link
    try:
        for entry in sorted(os.scandir(rootfd), key=lambda e: e.name):
            name = entry.name
            if name.startswith(".identity.") and name.endswith(".tmp") and _dead(name):
                os.unlink(name, dir_fd=rootfd)  # a mark half written by a killed writer
                removed.append(name)
                continue
            if not name.startswith((STAGING, "source_id=")):
                continue
            if entry.is_symlink():
                os.unlink(name, dir_fd=rootfd)
                removed.append(name)
            elif name.startswith(STAGING) and entry.is_dir(follow_symlinks=False):
                if _abandoned(root / name):
                    shutil.rmtree(name, dir_fd=rootfd, ignore_errors=True)
                    removed.append(name)
            elif entry.is_dir(follow_symlinks=False):
                removed += _sweep_source(rootfd, Path(name), listed)
    finally:
        os.close(rootfd)
    return removed


def _dead(tmp_mark: str) -> bool:
    """Whether the writer that named `.identity.PID.tmp` is gone."""
    try:
        pid = int(tmp_mark.split(".")[2])
    except (IndexError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return pid == os.getpid()  # this process writes none while it sweeps


def _sweep_source(rootfd: int, rel: Path, listed: set[str]) -> list[str]:
    removed: list[str] = []
    try:
        fd = os.open(rel.name, _DIR, dir_fd=rootfd)
    except OSError:  # gone, or swapped for a link since it was listed
        return removed
    try:
        for f in sorted(os.scandir(fd), key=lambda e: e.name):
            frel = (rel / f.name).as_posix()
            if frel in listed:
                continue
            if f.is_symlink() or f.name.endswith((".parquet", ".tmp")):
                if f.is_dir(follow_symlinks=False):
                    shutil.rmtree(f.name, dir_fd=fd, ignore_errors=True)
                else:
                    os.unlink(f.name, dir_fd=fd)
                removed.append(frel)
        empty = not any(True for _ in os.scandir(fd))
    finally:
        os.close(fd)
    if empty:
        os.rmdir(rel.name, dir_fd=rootfd)
    return removed
