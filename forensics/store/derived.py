"""The named queries as views, and their rows stored by ingest (answers without
recomputing them)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import duckdb

from ..queries import all_queries

# Every answer reads the named views, and a view computed on each use cost seconds on a
# large database (report read `rooms` three times: 1.9 s in-process on 742 MB). Ingest
# stores each view's rows as `derived_<name>` in its own transaction. A stored copy is
# used only while it is what this code's SQL gives on this data: meta keeps, per view,
# a hash of its SQL (and of what it depends on) and a fingerprint of the data (every
# source and run's tags), so a database written by another version, or by code whose
# SQL differs, is answered from the SQL as before.
DERIVED = "derived_"
STAMP = "derived:"  # meta key prefix: derived:<view> = <SQL hash>:<data fingerprint>


def install_views(con: duckdb.DuckDBPyConnection, temp: bool = False) -> None:
    """The named queries as views: in the file, their SQL; for this process (temp), their
    stored rows where those are fresh (see refresh_derived), else their SQL."""
    fresh = _fresh_derived(con, _query_hashes(), _fingerprint(con)) if temp else set()
    kind = "TEMP VIEW" if temp else "VIEW"
    for q in all_queries():
        body = f"SELECT * FROM main.{DERIVED}{q.name}" if q.name in fresh else q.sql
        con.execute(f"CREATE OR REPLACE {kind} {q.name} AS {body}")


def _query_hashes() -> dict[str, str]:
    hashes: dict[str, str] = {}
    for q in all_queries():  # dependencies first
        h = hashlib.sha256(q.sql.encode())
        for d in q.depends:
            h.update(hashes[d].encode())
        hashes[q.name] = h.hexdigest()[:16]
    return hashes


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    """What the stored rows were computed from: every source (ingest only ever adds
    one) and every run's tags."""
    return con.execute(
        """SELECT md5(concat_ws('|',
               (SELECT string_agg(source_id || ':' || sha256, ',' ORDER BY source_id)
                FROM sources),
               (SELECT string_agg(run || '=' || coalesce(tags::VARCHAR, ''), ','
                                  ORDER BY run) FROM runs)))"""
    ).fetchall()[0][0]


def _stamp(sql_hash: str, fp: str) -> str:
    return f"{sql_hash}:{fp}"


def _fresh_derived(con: duckdb.DuckDBPyConnection, hashes: dict[str, str], fp: str) -> set[str]:
    """The views whose stored rows are this SQL's (`hashes`) on this data (`fp`)."""
    # a stored row set counts only with its table (one dropped by hand is not an error)
    stored = dict(
        con.execute(
            f"""SELECT m.key, m.value FROM meta m
                JOIN duckdb_tables() t
                  ON t.schema_name = 'main' AND NOT t.temporary
                 AND t.table_name = '{DERIVED}' || substr(m.key, {len(STAMP) + 1})
                WHERE m.key LIKE '{STAMP}%'"""
        ).fetchall()
    )
    fresh: set[str] = set()
    for q in all_queries():  # dependencies first: rows computed from stale rows are stale
        stored_ok = stored.get(f"{STAMP}{q.name}") == _stamp(hashes[q.name], fp)
        if stored_ok and fresh.issuperset(q.depends):
            fresh.add(q.name)
    return fresh


Deriver = Callable[[duckdb.DuckDBPyConnection], object]


def refresh_derived(con: duckdb.DuckDBPyConnection, derivers: Sequence[Deriver] = ()) -> list[str]:
    """Store every named view's rows (those not already fresh) for this data, and install
    the file's named views; the names recomputed. Run inside the writer's transaction,
    after its last change. `derivers`: the answers stored with the data that the layers
    above compute (handed in: the store imports nothing above it; one left out is
    computed as it is read, the stamp on its rows saying they are stale)."""
    hashes, fp = _query_hashes(), _fingerprint(con)
    fresh = _fresh_derived(con, hashes, fp)
    done = []
    for q in all_queries():
        if not q.stored:  # a plain view: computed as it is read
            con.execute(f"CREATE OR REPLACE VIEW main.{q.name} AS {q.sql}")
            con.execute(f"CREATE OR REPLACE TEMP VIEW {q.name} AS {q.sql}")
            continue
        if q.name not in fresh:
            con.execute(f"CREATE OR REPLACE TABLE {DERIVED}{q.name} AS {q.sql}")
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [f"{STAMP}{q.name}", _stamp(hashes[q.name], fp)],
            )
            done.append(q.name)
        # The file's view, for any client, is the SQL; bound here against the temporary
        # views of what it depends on (stored rows), not its whole chain of views over
        # the shards again (0.09 s of every ingest). Its text names them unqualified, so
        # another client resolves them to the file's views.
        con.execute(f"CREATE OR REPLACE VIEW main.{q.name} AS {q.sql}")
        # what depends on this view reads the stored rows, not its SQL again
        con.execute(f"CREATE OR REPLACE TEMP VIEW {q.name} AS SELECT * FROM main.{DERIVED}{q.name}")
    for derive in derivers:  # the lines near each transfer: an analysis's rows, stored alike
        derive(con)
    return done
