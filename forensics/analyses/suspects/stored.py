"""The lines near each transfer and the values the lines about each request name,
computed once at ingest (`derived_near`, declared in parsers/tables.py) and read back by
`suspects` instead of computed again.

Weighing every template near every transfer is most of `suspects`' time on a large
incident (0.85 s of 1.7 at 1.5 M lines). Ingest computes it for the default scope — every
run, no window — and stores each predicate's exposure as bits over the judged requests
in the order of their results lines. A read uses them only when they are exactly what it
would compute: its scope is that default one (nothing shadowed), the stamp in `meta` is
this code's on this data, and the judged requests are the ones the bits were written for
(a digest of their keys). Anything else computes them as it reads (nearby.near).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import numpy as np

from ...parsers.tables import NEAR
from .features import Table
from .named_levels import PREFIX, named_levels, value_predicate
from .nearby import near
from .predicates import Predicate, Skipped

STAMP = "derived:near"  # meta key: <code>:<data fingerprint>:<requests' digest>


def _code() -> str:
    """What the stored rows were computed by: the module that weighs the lines, this one
    (their form), the view of each request's anchor it reads, and which patterns are
    bookkeeping."""
    from ...parsers.pattern_names import BUILTIN
    from ...store.derived import _query_hashes

    h = hashlib.sha256(Path(__file__).with_name("nearby.py").read_bytes())
    h.update(Path(__file__).with_name("named_levels.py").read_bytes())
    h.update(Path(__file__).read_bytes())
    h.update(_query_hashes()["request_evidence"].encode())
    h.update(BUILTIN.read_bytes())
    return h.hexdigest()[:16]


def _requests(table: Table) -> str:
    """The judged requests the bits are over, in their order."""
    h = hashlib.blake2b(digest_size=16)
    if table.keys is not None:
        h.update("\x1f".join(str(r) for r in table.run).encode())
        for k in table.keys:
            h.update(np.ascontiguousarray(k, dtype=np.int64).tobytes())
    return h.hexdigest()


def _stamp(con: duckdb.DuckDBPyConnection, table: Table) -> str:
    from ...store.derived import _fingerprint

    return f"{_code()}:{_fingerprint(con)}:{_requests(table)}"


def store_near(con: duckdb.DuckDBPyConnection) -> None:
    """Compute the lines near every judged request's transfer (every run, no window) and
    store them with their stamp. Run by the writer, after the named views are stored."""
    from .features import load_table

    runs = [r for (r,) in con.execute("SELECT run FROM runs ORDER BY created, rowid").fetchall()]
    table = load_table(con, runs, {}, ()) if runs else Table({}, np.zeros(0, bool), np.zeros(0))
    stamp = _stamp(con, table)
    if _stored_stamp(con) == stamp:
        return
    preds, skipped = near(con, None, table)
    rows = _rows(preds, skipped)
    rows += _named_rows(*named_levels(con, table), start=len(rows))
    columns = ", ".join(c.ddl() for c in NEAR.all_columns)
    con.execute(f"CREATE OR REPLACE TABLE main.{NEAR.name} ({columns})")
    if rows:
        cols = list(zip(*rows, strict=True))
        types = [c.type for c in NEAR.all_columns]
        unnest = ", ".join(f"unnest(?::{t}[])" for t in types)
        con.execute(f"INSERT INTO main.{NEAR.name} SELECT {unnest}", [list(c) for c in cols])
    con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [STAMP, stamp])


def _stored_stamp(con: duckdb.DuckDBPyConnection) -> str | None:
    """The stamp of the stored rows (None: none, or their table is gone)."""
    got = con.execute(
        f"""SELECT m.value FROM meta m JOIN duckdb_tables() t
              ON t.schema_name = 'main' AND NOT t.temporary AND t.table_name = '{NEAR.name}'
            WHERE m.key = ?""",
        [STAMP],
    ).fetchall()
    return got[0][0] if got else None


def _rows(preds: list[Predicate], skipped: list[Skipped]) -> list[tuple]:
    """(ord, kind, side, level, after, window_s, template, text, occurrences, bits) rows."""
    rows: list[tuple] = []
    known: dict[str, np.ndarray] = {}
    for p in preds:
        _, side, tid = p.feature.split()
        if side in known and not np.array_equal(known[side], p.known):
            raise AssertionError(f"the lines near the transfer on {side}: two known masks")
        if side not in known:
            known[side] = p.known
            rows.append((len(rows), "known", side, None, None, None, None, None, None,
                         np.packbits(p.known).tobytes()))  # fmt: skip
        rows.append((len(rows), "line", side, None, p.after, float(p.level or 0), int(tid, 16),
                     p.text, p.occurrences, np.packbits(p.exposed).tobytes()))  # fmt: skip
    for k in skipped:
        rows.append((len(rows), "skipped", k.feature, None, None, None, None, k.why, None, None))
    return rows


def _named_rows(preds: list[Predicate], skipped: list[Skipped], start: int) -> list[tuple]:
    """The named values' rows: a name's known mask before its values, then what was left
    out."""
    rows: list[tuple] = []
    known: set[str] = set()
    for p in preds:
        name = p.feature.removeprefix(PREFIX)
        if name not in known:
            known.add(name)
            rows.append((start + len(rows), "named_known", name, None, None, None, None, None,
                         None, np.packbits(p.known).tobytes()))  # fmt: skip
        rows.append((start + len(rows), "named", name, p.level, None, None, None, p.text, None,
                     np.packbits(p.exposed).tobytes()))  # fmt: skip
    for k in skipped:
        rows.append((start + len(rows), "named_skipped", k.feature, None, None, None, None,
                     k.why, None, None))  # fmt: skip
    return rows


def stored_near(
    con: duckdb.DuckDBPyConnection, table: Table
) -> tuple[list[Predicate], list[Skipped]] | None:
    """What nearby.near gives for every run and `table`, read back (None: not stored for
    this code, data or these requests)."""
    got = read_stored(con, table)
    return None if got is None else got[0]


def stored_named(
    con: duckdb.DuckDBPyConnection, table: Table
) -> tuple[list[Predicate], list[Skipped]] | None:
    """What named_levels gives for `table`, read back (None: not stored for it)."""
    got = read_stored(con, table)
    return None if got is None else got[1]


def read_stored(con: duckdb.DuckDBPyConnection, table: Table) -> tuple[tuple, tuple] | None:
    """(near's predicates and skips, the named values' predicates and skips)."""
    from .nearby import line_predicate

    if _stored_stamp(con) != _stamp(con, table):
        return None
    rows = con.execute(
        f"""SELECT kind, side, level, after, window_s, template, text, occurrences, bits
            FROM main.{NEAR.name} ORDER BY ord"""
    ).fetchall()
    n = len(table)
    nbytes = (n + 7) // 8
    bits = [r[8] for r in rows if r[8] is not None]
    if any(len(b) != nbytes for b in bits):
        return None
    flat = np.frombuffer(b"".join(bits), dtype=np.uint8).reshape(len(bits), nbytes)
    matrix = np.unpackbits(flat, axis=1, count=n).astype(bool)
    near_p: list[Predicate] = []
    near_s: list[Skipped] = []
    named_p: list[Predicate] = []
    named_s: list[Skipped] = []
    known: dict[tuple[str, str], np.ndarray] = {}
    i = 0
    for kind, side, level, after, window_s, template, text, occurrences, b in rows:
        if kind in ("skipped", "named_skipped"):
            (near_s if kind == "skipped" else named_s).append(Skipped(side, text))
            continue
        row, i = matrix[i], i + (b is not None)
        if kind in ("known", "named_known"):
            known[(kind, side)] = row
        elif kind == "line":
            near_p.append(line_predicate(side, bool(after), window_s, int(template), text, row,
                                         known[("known", side)], int(occurrences)))  # fmt: skip
        else:
            named_p.append(value_predicate(side, level, text, row, known[("named_known", side)]))
    return (near_p, near_s), (named_p, named_s)
