"""The named views on Spark SQL over an incident's own shard files, their SQL transpiled
from DuckDB's by sqlglot, compared row for row with DuckDB's answers (docs/scale-out.md).

    python3 bench/spark.py [DB] [--views rooms,requests]   # pip install pyspark sqlglot; a JDK

Without DB it builds a planted incident (checksums, canaries, steps, harness results).
Each sharded table is a Spark view over exactly the registered files (hive partitioning
gives `source_id` from the folder name, as for DuckDB); a table without files is an
empty frame of its declared schema. Values are compared as text (Spark reads UBIGINT as
DECIMAL(20,0)); doubles to 9 significant digits. Prints one line per view.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import sqlglot


def _spark_type(t: str):
    from pyspark.sql import types as T

    simple = {"VARCHAR": T.StringType(), "BIGINT": T.LongType(), "INTEGER": T.IntegerType(),
              "UBIGINT": T.DecimalType(20, 0), "BOOLEAN": T.BooleanType(),
              "DOUBLE": T.DoubleType(), "TINYINT": T.ByteType(), "SMALLINT": T.ShortType(),
              "BLOB": T.BinaryType()}  # fmt: skip
    if t.endswith("[]"):
        return T.ArrayType(simple[t[:-2]])
    return simple[t]


def _norm(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float):
        return f"{v:.9g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_norm(x) for x in v) + "]"
    return str(v)


def _unsigned(node):
    """Spark has no unsigned types: a room (UBIGINT) is a DECIMAL(20,0) there, as Spark
    reads Parquet's UINT64."""
    from sqlglot import exp

    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.UBIGINT:
        return exp.DataType.build("DECIMAL(20,0)")
    return node


def to_spark(sql: str) -> str:
    """A view's DuckDB SQL as Spark SQL (sqlglot; refused where it knows no equivalent)."""
    tree = sqlglot.parse_one(sql, read="duckdb").transform(_unsigned)
    return tree.sql(dialect="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)


def planted(where: Path) -> Path:
    import forensics
    from forensics.synthetic import incident

    inc = incident.generate(sessions=8, rounds=5, steps_per_request=2, seed=5,
                            corruption="effect", bad_share=0.3)  # fmt: skip
    logs = [incident.write_export(inc.prefill, where / "prefill.export"),
            incident.write_export(inc.decode, where / "decode.export"),
            incident.write_results(inc.results, where / "results.jsonl")]  # fmt: skip
    db = where / "incident.duckdb"
    forensics.ingest([str(p) for p in logs], db, run="planted")
    return db


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db", nargs="?")
    ap.add_argument("--views", default="rooms,requests")
    args = ap.parse_args(argv)
    from forensics.parsers.tables import SHARDED
    from forensics.queries import all_queries
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    from forensics.store import connect_read_only
    from forensics.store.shards import folder

    with tempfile.TemporaryDirectory(prefix="forensics-spark-") as tmp:
        db = Path(args.db) if args.db else planted(Path(tmp))
        con = connect_read_only(db)
        base = db.resolve().parent
        spark = (SparkSession.builder.master("local[2]").appName("pd-forensics")
                 .config("spark.sql.session.timeZone", "UTC")
                 .config("spark.ui.enabled", "false").getOrCreate())  # fmt: skip
        spark.sparkContext.setLogLevel("ERROR")
        for name, t in SHARDED.items():
            files = [
                str(base / p)
                for (p,) in con.execute(
                    "SELECT path FROM shards WHERE table_name = ? ORDER BY path", [name]
                ).fetchall()
            ]
            schema = T.StructType(
                [T.StructField(c.name, _spark_type(c.type)) for c in t.all_columns]
            )
            if files:
                df = spark.read.option("basePath", str(folder(db.resolve()))).parquet(*files)
                df = df.selectExpr(*(f"CAST(`{c.name}` AS {_spark_type(c.type).simpleString()}) "
                                     f"AS `{c.name}`" for c in t.all_columns))  # fmt: skip
            else:
                df = spark.createDataFrame([], schema)
            df.createOrReplaceTempView(name)
        failed: dict[str, str] = {}
        for q in all_queries():  # dependencies first
            if any(d in failed for d in q.depends):
                failed[q.name] = "reads a view Spark could not take"
                continue
            try:
                spark.sql(f"CREATE OR REPLACE TEMP VIEW {q.name} AS {to_spark(q.sql)}")
            except Exception as exc:  # sqlglot's or Spark's refusal, reported per view
                failed[q.name] = str(exc).strip().splitlines()[0][:160]
        for name, why in failed.items():
            print(f"{name}: not on Spark: {why}")
        for view in args.views.split(","):
            if view in failed:
                continue
            t0 = time.perf_counter()
            rows = spark.sql(f"SELECT * FROM {view}").collect()
            got = sorted(tuple(_norm(v) for v in r) for r in rows)
            spark_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            want = sorted(tuple(_norm(v) for v in r) for r in con.execute(
                f"SELECT * FROM {view}").fetchall())  # fmt: skip
            duck_s = time.perf_counter() - t0
            same = got == want
            print(
                f"{view}: {len(want)} rows in DuckDB ({duck_s:.2f} s), {len(got)} in Spark "
                f"({spark_s:.2f} s): {'equal, row for row' if same else 'DIFFERENT'}"
            )
            if not same:
                extra = set(got) - set(want)
                missing = set(want) - set(got)
                print(
                    f"  only in Spark: {sorted(extra)[:2]}\n  only in DuckDB: {sorted(missing)[:2]}"
                )
        spark.stop()
        con.close()


if __name__ == "__main__":
    sys.exit(main())
