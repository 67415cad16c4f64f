"""Whether the registered shard files are the ones registered, before they are an answer.

On every open (cheap: one lstat a file): each registered path lies inside the shard folder
(relative, no `..`, no link on the way) and is a regular file of the registered size. A
source with a file that fails is damaged: analyses refuse with one line naming it and the
way out; `sources`, `sources remove N` and `ingest` work beside it (the views leave it out).
`forensics verify` checks everything: each file's sha256, its rows, and that it is a shard
of the registered table.
"""

from __future__ import annotations

import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import duckdb


@dataclass(frozen=True)
class Bad:
    source_id: int
    path: str  # relative to the shard folder, as registered
    why: str


@dataclass
class Damage:
    files: list[Bad] = field(default_factory=list)
    inputs: dict[int, str] = field(default_factory=dict)  # source id -> its input's path
    folder_missing: str = ""  # the shard folder, where it is gone as a whole

    @property
    def sources(self) -> frozenset[int]:
        return frozenset(b.source_id for b in self.files)

    def __bool__(self) -> bool:
        return bool(self.files)

    def of(self, source_id: int) -> Damage:
        """The damage of one source (empty when it is sound)."""
        return Damage([b for b in self.files if b.source_id == source_id], self.inputs,
                      self.folder_missing)  # fmt: skip

    def line(self) -> str:
        """One line: the first damaged source, its file, and the way out."""
        if self.folder_missing:
            return (f"the shard folder {self.folder_missing} is missing: was the catalog "
                    "moved without it? `forensics mv` moves both (`forensics sources "
                    "remove N` forgets a source)")  # fmt: skip
        b = self.files[0]
        more = len(self.sources) - 1
        also = f" (and {more} more source{'s' * (more > 1)}: `forensics verify`)" if more else ""
        src = self.inputs.get(b.source_id, "?")
        return (f"source {b.source_id} ({src}) is damaged: {b.path} {b.why}{also}; "
                f"`forensics sources remove {b.source_id}` removes it, then `forensics ingest "
                f"{shlex.quote(src)}` reads it again")  # fmt: skip

    def as_dict(self) -> dict:
        return {"damaged": [b.__dict__ for b in self.files],
                "sources": sorted(self.sources)}  # fmt: skip


def inside(root: Path, rel: str) -> Path | None:
    """The registered file under the shard folder, or None where the path leaves it
    (absolute, `..`, or a link on the way: nothing inside the folder is followed)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(x in ("", ".", "..") for x in p.parts):
        return None
    here = root
    for part in p.parts:
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                return None
        except FileNotFoundError:
            return here  # missing: said by the caller
        except OSError:
            return None
    return here


def _rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return con.execute(
        "SELECT source_id, path, table_name, rows, bytes, sha256 FROM shards "
        "ORDER BY source_id, path"
    ).fetchall()


def _inputs(con: duckdb.DuckDBPyConnection) -> dict[int, str]:
    return dict(con.execute("SELECT source_id, path FROM sources").fetchall())


# Files whose Parquet footer could not be parsed though their size and magic were right
# (a byte flipped inside it): found when a view over them failed, remembered by path,
# size and time so that every later check of this process names them.
_UNREADABLE: dict[tuple[str, int, int], str] = {}
MAGIC = b"PAR1"


def unreadable(files: list[Path]) -> list[Path]:
    """Which of these files no Parquet reader can open (each footer parsed); remembered
    for `check`. Called where a view over them failed without naming the file."""
    import pyarrow.parquet as pq

    bad = []
    for f in files:
        try:
            pq.read_metadata(f)
        except Exception as exc:
            st = os.stat(f)
            first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
            _UNREADABLE[(str(f), st.st_size, st.st_mtime_ns)] = (
                f"is not a readable Parquet file ({first})"
            )
            bad.append(f)
    return bad


def _magic(f: Path, st: os.stat_result) -> str | None:
    """A Parquet file starts and ends with PAR1: garbage or a zeroed footer of the right
    size is caught here, on every open, for two small reads."""
    if (why := _UNREADABLE.get((str(f), st.st_size, st.st_mtime_ns))) is not None:
        return why
    try:
        with open(f, "rb") as fh:
            head = fh.read(4)
            fh.seek(max(0, st.st_size - 4))
            tail = fh.read(4)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if head != MAGIC or tail != MAGIC or st.st_size < 12:
        return "is not a Parquet file (garbage, or its footer is damaged)"
    return None


def _cheap(root: Path, rel: str, size: int | None) -> str | None:
    f = inside(root, rel)
    if f is None:
        return "lies outside the shard folder"
    try:
        st = os.lstat(f)
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a file"
    if size is not None and st.st_size != size:
        return f"has {st.st_size:,} bytes, {size:,} registered"
    if not os.access(f, os.R_OK):
        return "cannot be read (permission denied)"
    return _magic(f, st)


def check(con: duckdb.DuckDBPyConnection, root: Path) -> Damage:
    """The cheap check of every registered file (on every open)."""
    dmg = Damage()
    for sid, rel, _table, _n, size, _sha in _rows(con):
        why = _cheap(root, rel, size)
        if why:
            dmg.files.append(Bad(sid, rel, why))
    if dmg:
        dmg.inputs = _inputs(con)
        _folder_gone(con, root, dmg)
    return dmg


def _folder_gone(con: duckdb.DuckDBPyConnection, root: Path, dmg: Damage) -> None:
    """Every file missing and the folder unmarked: the folder, not its files, is gone."""
    rows = con.execute("SELECT count(*) FROM shards").fetchall()[0][0]
    gone = bool(rows) and len(dmg.files) == rows and all(b.why == "is missing" for b in dmg.files)
    if gone and not (root / ".identity").exists():
        dmg.folder_missing = str(root)


def verify_files(con: duckdb.DuckDBPyConnection, root: Path) -> tuple[Damage, int, int]:
    """Every registered file read whole: (damage, files, bytes checked)."""
    dmg, files, nbytes = Damage(), 0, 0
    for sid, rel, table, n, size, sha in _rows(con):
        files += 1
        why = _cheap(root, rel, size)
        if why is None:
            f = root / rel
            nbytes += size or 0
            why = _deep(f, table, n, sha)
        if why:
            dmg.files.append(Bad(sid, rel, why))
    dmg.inputs = _inputs(con)
    _folder_gone(con, root, dmg)
    return dmg, files, nbytes


def _deep(f: Path, table: str, rows: int | None, sha: str | None) -> str | None:
    import pyarrow.parquet as pq

    from .shards import META_TABLE, file_sha256

    if sha and file_sha256(f) != sha:
        return "is not the file registered (sha256 differs)"
    try:
        meta = pq.ParquetFile(f).metadata
    except Exception as exc:  # pyarrow raises several kinds for a broken file
        return f"is not a readable Parquet file ({type(exc).__name__})"
    kv = meta.metadata or {}
    if kv.get(META_TABLE, table.encode()) != table.encode():
        return f"is a shard of {kv[META_TABLE].decode(errors='replace')}, not of {table}"
    if rows is not None and meta.num_rows != rows:
        return f"holds {meta.num_rows:,} rows, {rows:,} registered"
    return None


@dataclass
class Verified:
    db: Path
    files: int
    bytes: int
    damage: Damage
    pairing: str  # whole | lagging | behind | foreign | new (pairing.py)
    note: str

    @property
    def clean(self) -> bool:
        return not self.damage and self.pairing in ("whole", "new", "lagging")

    def as_dict(self) -> dict:
        return {"db": str(self.db), "clean": self.clean, "files": self.files,
                "bytes": self.bytes, "pairing": self.pairing, "note": self.note,
                **self.damage.as_dict()}  # fmt: skip

    def sentences(self) -> list[str]:
        out = [
            f"{self.db}: {self.files:,} shard files, {self.bytes / 2**20:,.1f} MB read: "
            + (
                "every one as registered"
                if not self.damage
                else f"{len(self.damage.files)} damaged in {len(self.damage.sources)} source(s)"
            )
        ]
        for b in self.damage.files:
            out.append(
                f"source {b.source_id} ({self.damage.inputs.get(b.source_id, '?')}): "
                f"{b.path} {b.why}"
            )
        if self.damage:
            out.append(self.damage.line())
        if self.note:
            out.append(self.note)
        return out


def verify(db=None) -> Verified:
    """Every registered shard file read whole (sha256, rows, table), and the catalog's
    standing with its folder."""
    from .database import connect_read_only, db_path, shard_root
    from .pairing import state

    con = connect_read_only(db, damaged_ok=True)
    try:
        root = shard_root(con)
        damage, files, nbytes = verify_files(con, root)
        how, why = state(con, root, db_path(db))
    finally:
        con.close()
    return Verified(db_path(db), files, nbytes, damage, how, why)
