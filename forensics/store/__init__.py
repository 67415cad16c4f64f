"""Ingest and store: inputs (inputs.py) are read by the parsers, each into a staged
source of Parquet files, its records parsed alongside (stage.py, records.py), in parallel
processes or Ray tasks (ingest.py, remote.py); the staged sources register in one
transaction of the catalog (register.py), the .duckdb file whose schema, connections and
migrations are database.py, with the shard folder beside it (shards.py) and the views
over it; the named queries' views and the rows ingest stores for them are derived.py;
legacy.py reads databases from before the shards; sources.py and summary.py describe and
manage what a database holds.

The database's API is importable from here (`from forensics.store import connect`).
"""

from .database import (
    DEFAULT_DB,
    SCHEMA_VERSION,
    connect,
    connect_read_only,
    db_path,
    first_row,
    scalar,
    transaction,
)
from .derived import refresh_derived
from .upgrade import upgrade

__all__ = [
    "DEFAULT_DB",
    "SCHEMA_VERSION",
    "connect",
    "connect_read_only",
    "db_path",
    "first_row",
    "refresh_derived",
    "scalar",
    "transaction",
    "upgrade",
]
