"""A catalog and its shard folder know each other.

The catalog's meta holds an identity (made once, with the catalog), a generation counted
up at every commit, the commit's token and the one before it; the shard folder's
`.identity` file holds the identity, generation and token of the last commit that wrote
it (written right after the commit). On every open they are compared:

- same token: the pair is whole;
- the catalog one commit ahead, its previous token the folder's: the folder's file was
  not written after the last commit (a kill between the two) — a writer writes it;
- anything else: this catalog is not the one that last wrote the folder — a byte copy of
  the catalog alone (`cp inc.duckdb inc.bak`, which shares `inc.shards`) after the
  original's next commit, or another catalog beside it whose name gives the same folder
  (`x.db` and `x.duckdb`). It still reads (with one line saying so) and never writes:
  `forensics copy` makes a copy that owns its own folder.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from ..errors import ForensicsError
from .version import SCHEMA_VERSION

MARK = ".identity"
KEYS = ("identity", "generation", "token", "previous_token")


@dataclass(frozen=True)
class Mark:
    identity: str
    generation: int
    token: str
    previous: str = ""
    catalog: str = ""  # the file name of the catalog that wrote the folder's mark
    schema: int = 0  # the schema of the pd-forensics that wrote it

    def doc(self) -> bytes:
        return orjson.dumps({"identity": self.identity, "generation": self.generation,
                             "token": self.token, "catalog": self.catalog,
                             "schema": SCHEMA_VERSION})  # fmt: skip


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    rows = con.execute(
        f"SELECT key, value FROM meta WHERE key IN ({', '.join('?' * len(KEYS))})", list(KEYS)
    ).fetchall()
    return dict(rows)


def _set(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
    for k, v in values.items():
        con.execute("DELETE FROM meta WHERE key = ?", [k])
        con.execute("INSERT INTO meta VALUES (?, ?)", [k, v])


def catalog_mark(con: duckdb.DuckDBPyConnection) -> Mark | None:
    m = _meta(con)
    if "identity" not in m:
        return None
    return Mark(m["identity"], int(m.get("generation", "0")), m.get("token", ""),
                m.get("previous_token", ""))  # fmt: skip


def new_identity(con: duckdb.DuckDBPyConnection) -> Mark:
    """A catalog's identity, made with it (or for an independent copy), in the caller's
    transaction."""
    mark = Mark(uuid.uuid4().hex, 1, uuid.uuid4().hex, "")
    _set(con, {"identity": mark.identity, "generation": "1", "token": mark.token,
               "previous_token": ""})  # fmt: skip
    return mark


def stamp(con: duckdb.DuckDBPyConnection) -> Mark:
    """The next generation, in the caller's transaction (written to the folder after the
    commit by `mark_folder`)."""
    old = catalog_mark(con)
    if old is None:
        return new_identity(con)
    mark = Mark(old.identity, old.generation + 1, uuid.uuid4().hex, old.token)
    _set(con, {"generation": str(mark.generation), "token": mark.token,
               "previous_token": old.token})  # fmt: skip
    return mark


def folder_mark(root: Path) -> Mark | None:
    try:
        doc = orjson.loads((root / MARK).read_bytes())
        return Mark(str(doc["identity"]), int(doc["generation"]), str(doc["token"]),
                    catalog=str(doc.get("catalog") or ""),
                    schema=int(doc.get("schema") or 0))  # fmt: skip
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return Mark("?", -1, "?")  # unreadable: never the catalog's


def mark_folder(root: Path, mark: Mark, catalog: Path | None = None) -> None:
    """The folder's file, replaced whole (a reader never sees half of it), naming the
    catalog that wrote it (`catalog`, else the folder's own name's)."""
    name = catalog.name if catalog is not None else root.name.removesuffix(".shards") + ".duckdb"
    mark = Mark(mark.identity, mark.generation, mark.token, mark.previous, name)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{MARK}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(mark.doc())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / MARK)


def current(catalog: Path) -> bool:
    """Whether the folder's mark says this catalog, of this schema, wrote it last: a
    writer may then skip the probe that opens the catalog before reading its inputs (a
    copy, a renamed catalog, an older one and a folder with no mark are probed)."""
    mark = folder_mark(catalog.with_name(catalog.stem + ".shards"))
    return mark is not None and mark.catalog == catalog.name and mark.schema == SCHEMA_VERSION


def _another_catalog(root: Path, catalog: Path | None) -> bool:
    """Whether a DuckDB file other than `catalog` sits beside the folder under its stem
    (`x.db` beside `x.duckdb`): an unmarked folder may then be that one's."""
    stem = root.name.removesuffix(root.suffix)
    for f in root.parent.glob(f"{stem}.*"):
        if f == root or (catalog is not None and f.name in (catalog.name, catalog.name + ".wal")):
            continue
        try:
            with open(f, "rb") as fh:
                if fh.read(12)[8:12] == b"DUCK":
                    return True
        except OSError:
            continue
    return catalog is None  # not knowing which catalog asks: never sweep on a guess


def _holds_sources(root: Path) -> bool:
    try:
        return any(e.name.startswith("source_id=") for e in os.scandir(root))
    except OSError:
        return False


def state(
    con: duckdb.DuckDBPyConnection, root: Path, catalog: Path | None = None
) -> tuple[str, str]:
    """(whole | behind | foreign | lagging | new, why): how this catalog stands with its
    folder. A catalog under another name than the one that marked the folder, while that
    one is still beside it, is a copy (`cp inc.duckdb inc.bak` shares `inc.shards`): it
    stands behind, whatever its generation; where that one is gone, it was renamed."""
    mine, theirs = catalog_mark(con), folder_mark(root)
    if (
        theirs is not None
        and catalog is not None
        and theirs.catalog
        and theirs.catalog != catalog.name
        and (root.parent / theirs.catalog).exists()
        and Path(theirs.catalog).stem + root.suffix == root.name  # that one's folder too
    ):
        return "behind", (f"{root.name} is {theirs.catalog}'s, beside it: this catalog "
                          f"({catalog.name}) is a copy of it")  # fmt: skip
    if theirs is None:
        if not _holds_sources(root):
            return "new", ""
        if not con.execute("SELECT count(*) FROM shards").fetchall()[0][0]:
            if _another_catalog(root, catalog):  # one of before marks, say: its files
                return "foreign", f"{root.name} holds another catalog's files"
            # A first ingest killed after it renamed its source in, before its commit
            # marked the folder: files no catalog lists, which the writer's sweep removes.
            return "new", ""
        return "lagging", "the shard folder's identity file is missing"
    if mine is None:
        return "foreign", f"{root.name} belongs to another catalog"
    if theirs.identity != mine.identity:
        return "foreign", f"{root.name} belongs to another catalog (another identity)"
    if theirs.token == mine.token:
        return "whole", ""
    if mine.generation == theirs.generation + 1 and mine.previous == theirs.token:
        return "lagging", "the shard folder missed the catalog's last commit"
    return "behind", (
        f"this catalog (generation {mine.generation}) is not the one that last wrote "
        f"{root.name} (generation {theirs.generation}): a copy of the catalog alone?"
    )


WAY = "`forensics copy SRC DST` makes a copy with its own shard folder"


def check_writable(con: duckdb.DuckDBPyConnection, catalog: Path, root: Path) -> None:
    """A writer's open: refused with one line unless the pair is whole (a folder that
    missed the last commit is brought up to date)."""
    how, why = state(con, root, catalog)
    if how in ("whole", "new"):
        if how == "whole" and (m := folder_mark(root)) and m.catalog != catalog.name:
            mark_folder(root, m, catalog)  # renamed (the one it named is gone): re-marked
        return
    if how == "lagging":
        mark = catalog_mark(con)
        if mark is None:
            with_identity(con)
            mark = catalog_mark(con)
        if mark is not None:
            mark_folder(root, mark, catalog)
        return
    raise ForensicsError(f"{catalog} is read-only here: {why}; {WAY}")


def with_identity(con: duckdb.DuckDBPyConnection) -> None:
    """An identity for a catalog that has none (written before identities)."""
    con.execute("BEGIN TRANSACTION")
    new_identity(con)
    con.execute("COMMIT")


def reading_note(con: duckdb.DuckDBPyConnection, catalog: Path, root: Path) -> str | None:
    """The one line a reader shows when the pair is not whole (it reads all the same)."""
    how, why = state(con, root, catalog)
    if how in ("behind", "foreign"):
        return f"{catalog} opened read-only: {why}; {WAY}"
    return None
