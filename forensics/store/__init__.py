"""Ingest and store: inputs (inputs.py) are read by the parsers, their entries stored and
their records parsed alongside (records.py) in one DuckDB transaction (ingest.py), into
the file whose schema, connections and migrations are database.py; the named queries'
views and the rows ingest stores for them are derived.py; sources.py and summary.py
describe what a database holds.

The database's API is importable from here (`from forensics.store import connect`).
"""

from .database import (
    DEFAULT_DB,
    SCHEMA_VERSION,
    Db,
    connect,
    connect_read_only,
    db_path,
    first_row,
    reading,
    scalar,
    transaction,
    upgrade,
)
from .derived import refresh_derived

__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "Db",
    "connect",
    "connect_read_only",
    "db_path",
    "first_row",
    "reading",
    "refresh_derived",
    "scalar",
    "transaction",
    "upgrade",
]
