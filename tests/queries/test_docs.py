"""Every named query documents exactly the columns its view has, with their types."""

from __future__ import annotations

from pathlib import Path

import duckdb
from forensics.queries import all_queries

import forensics


def test_every_column_documented(tmp_path: Path, db: Path) -> None:
    f = tmp_path / "empty.log"
    f.write_text("")
    forensics.ingest([str(f)], db)  # creates the schema and the views
    con = duckdb.connect(str(db), read_only=True)
    try:
        for q in all_queries():
            assert q.summary and q.columns, q.name
            actual = [(r[0], r[1]) for r in con.execute(f"DESCRIBE {q.name}").fetchall()]
            documented = [(c[0], c[1]) for c in q.columns]
            assert documented == actual, q.name
            assert all(c[2].strip() for c in q.columns), q.name
    finally:
        con.close()
