"""`forensics query NAME`: the named queries of queries/*.sql, run read-only."""

from __future__ import annotations

from .errors import ForensicsError
from .queries import NamedQuery, all_queries, names
from .scope import Db
from .sql import query_rows


def list_queries() -> list[NamedQuery]:
    return list(all_queries())


def view_sql(name: str) -> str:
    """The SELECT over a named query's view; an unknown name is a clear error."""
    if name not in names():
        raise ForensicsError(f"no query named {name!r}; known: {', '.join(names())}")
    return f"SELECT * FROM {name}"


def run_named(name: str, db: Db = None) -> tuple[list[str], list[tuple]]:
    """Columns and rows of the named query's view."""
    return query_rows(view_sql(name), db)
