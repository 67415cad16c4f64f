"""Named queries: one documented .sql file each, installed as views of the same name.

A file's header says what one row is, documents every column with a line
`-- @column NAME TYPE description`, and names the views it reads with `-- @depends NAME`
(views are installed after what they depend on); the body is one SELECT. Tests check
that the documented columns are exactly the view's. Ingest stores each view's rows;
`-- @virtual` keeps one a plain view (a long form of a table is cheaper computed as read
than stored on every ingest).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

# a type may hold spaces inside its parentheses: MAP(VARCHAR, BIGINT)
_COLUMN = re.compile(r"^-- @column\s+(\w+)\s+(\w+\([^)]*\)|\S+)\s+(.*)$", re.M)
_DEPENDS = re.compile(r"^-- @depends\s+(\w+)\s*$", re.M)
_VIRTUAL = re.compile(r"^-- @virtual\s*$", re.M)


@dataclass(frozen=True)
class NamedQuery:
    name: str
    sql: str  # the SELECT
    summary: str  # the header's first paragraph
    columns: list[tuple[str, str, str]]  # (name, type, description)
    depends: list[str]  # views this one reads
    stored: bool = True  # ingest stores its rows (`-- @virtual`: never)


def load(name: str) -> NamedQuery:
    text = resources.files(__name__).joinpath(f"{name}.sql").read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("--")]
    # the header's first paragraph, whole (it may run over several comment lines)
    first = []
    for ln in header:
        text_ = ln.removeprefix("--").strip()
        if not text_:
            break
        first.append(text_)
    summary = " ".join(first) or name
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("--")).strip()
    return NamedQuery(
        name,
        body.rstrip(";"),
        summary,
        _COLUMN.findall(text),
        _DEPENDS.findall(text),
        not _VIRTUAL.search(text),
    )


def names() -> list[str]:
    return sorted(
        p.name.removesuffix(".sql")
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".sql")
    )


@lru_cache(maxsize=1)
def all_queries() -> tuple[NamedQuery, ...]:
    """Every named query, each after the ones it depends on (read once a process: every
    connection installs them)."""
    pending = {q.name: q for q in (load(n) for n in names())}
    ordered: list[NamedQuery] = []
    while pending:
        ready = [q for q in pending.values() if all(d not in pending for d in q.depends)]
        if not ready:
            raise ValueError(f"queries depend on each other in a cycle: {sorted(pending)}")
        for q in sorted(ready, key=lambda q: q.name):
            ordered.append(pending.pop(q.name))
    return tuple(ordered)
