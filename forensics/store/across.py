"""A text log whose host is a guess — its file's name (`decode.cat.log` read as SGLang's
stdout), or none at all (`-o cat`) — aligned against the entries of every host of the
sources that know their hosts, all at once.

Such a log holds one host's lines or, as `journalctl -o cat` of a merged journal,
several hosts' interleaved in time order; and its reader cannot see where a multi-line
message ends, so a traceback and the unprefixed line after it may be one entry where
the journal has one a line (or the other way round). So every message, on both sides,
is split into its lines; the known sides' lines are put in one sequence in time order
(the order journalctl merges hosts in), and the two sequences are aligned in order by
renderings.py's rule — over the common span, SHARE of the smaller side and MIN_ENTRIES,
or every line: first the k-th copy of a line within a second with the k-th on the
other side, then, of what is left, within SLACK_S either way (a program's own time
prefix and journald's reception time may straddle a second). Aligned against one host
at a time, a line both hosts print (a request's `Receive:`) would be taken from the
wrong host. An entry of the guessed side is matched when every one of its lines is.
"""

from __future__ import annotations

import duckdb
import numpy as np

from ..parsers.tables import read_parquet
from ..plural import counted
from .alignment import longest_chain
from .renderings import Pairing, Side, one_journal

SLACK_S = 1  # a line's own time and the journal's may differ by this many seconds
_LINES = """SELECT {src} AS src, entry_no, host, ts_us, ts_us // 1000000 AS t,
                   unnest(string_split(message, chr(10))) AS line,
                   generate_subscripts(string_split(message, chr(10)), 1) AS part
            FROM {files} WHERE message IS NOT NULL"""


def _load(con: duckdb.DuckDBPyConnection, guessed: Side, known: list[Side]) -> bool:
    """`_ax_g` and `_ax_k`: each side's lines in order (`seq`), with their entry, second
    and hash; whether the guessed side has a time. Of the known sides, only the lines
    near the guessed side's span are read (the row groups' time statistics skip the rest)."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _ax_g AS
        SELECT row_number() OVER (ORDER BY entry_no, part) AS seq, entry_no, part, t,
               hash(line) AS h
        FROM ({_LINES.format(src=guessed.sid, files=read_parquet(guessed.files))})""")
    lo, hi = con.execute("SELECT min(t), max(t) FROM _ax_g").fetchall()[0]
    # by the lines alone (no time here) every known line counts, in its source's order
    near = (
        ""
        if lo is None
        else f" AND ts_us BETWEEN {(lo - SLACK_S) * 10**6} AND {(hi + SLACK_S + 1) * 10**6}"
    )
    every = " UNION ALL ".join(_LINES.format(src=k.sid, files=read_parquet(k.files)) + near
                               for k in known)  # fmt: skip
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _ax_k AS
        SELECT row_number() OVER (ORDER BY ts_us NULLS FIRST, src, entry_no, part) AS seq,
               src, entry_no, host, t, hash(line) AS h
        FROM ({every})""")
    return lo is not None


def _candidates(con: duckdb.DuckDBPyConnection, timed: bool) -> tuple:
    """(guessed seq, known seq) candidates over the common span — the k-th copy of a line
    within a second with the k-th on the other side, then the rest within SLACK_S — and
    how many lines of each side the span holds."""
    mine, theirs = "SELECT * FROM _ax_g", "SELECT * FROM _ax_k"
    if timed:
        lo, hi = con.execute("""SELECT greatest((SELECT min(t) FROM _ax_g), min(t)),
                                       least((SELECT max(t) FROM _ax_g), max(t))
                                FROM _ax_k""").fetchall()[0]  # fmt: skip
        if lo is None or lo > hi:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0, 0
        cut = f" WHERE t BETWEEN {lo - SLACK_S} AND {hi + SLACK_S}"
        mine, theirs = mine + cut, theirs + cut
    near = f"abs(g2.t - k2.t) <= {SLACK_S}" if timed else "TRUE"
    got = con.execute(f"""
        WITH g AS ({mine}), k AS ({theirs}),
        g1 AS (SELECT *, row_number() OVER (PARTITION BY h, t ORDER BY seq) AS occ FROM g),
        k1 AS (SELECT *, row_number() OVER (PARTITION BY h, t ORDER BY seq) AS occ FROM k),
        first AS (SELECT g1.seq AS a, k1.seq AS b FROM g1 JOIN k1 USING (h, t, occ)),
        g2 AS (SELECT *, row_number() OVER (PARTITION BY h ORDER BY seq) AS occ FROM g
               WHERE seq NOT IN (SELECT a FROM first)),
        k2 AS (SELECT *, row_number() OVER (PARTITION BY h ORDER BY seq) AS occ FROM k
               WHERE seq NOT IN (SELECT b FROM first)),
        second AS (SELECT g2.seq AS a, k2.seq AS b FROM g2 JOIN k2 USING (h, occ) WHERE {near})
        SELECT a, b FROM first UNION ALL SELECT a, b FROM second""").fetchnumpy()
    n_mine, n_theirs = con.execute(
        f"SELECT (SELECT count(*) FROM ({mine})), (SELECT count(*) FROM ({theirs}))"
    ).fetchall()[0]
    return got["a"].astype(np.int64), got["b"].astype(np.int64), n_mine, n_theirs


def across_hosts(
    con: duckdb.DuckDBPyConnection, guessed: Side, known: list[Side], forced: bool = False
) -> Pairing:
    """The entries of `guessed` that the `known` sources hold (`forced`: without the
    share test, and by the lines alone where `guessed` has no time): `mine` their entry
    numbers; `kept` how many each known source holds; `hosts` the share per host."""
    known = [k for k in known if k.files]
    if not guessed.files or not known:
        return Pairing("none")
    try:
        timed = _load(con, guessed, known)
        if not timed and not forced:
            return Pairing("none")
        a, b, n_mine, n_theirs = _candidates(con, timed)
        keep = longest_chain(a, b)
        out = Pairing("across")
        ok = forced or one_journal(len(keep), n_mine, n_theirs)
        out.hosts[None] = (len(keep), n_mine, n_theirs, ok and len(keep) > 0)
        if ok and len(keep):
            _whole_entries(con, a[keep], b[keep], out)
        return out
    finally:
        con.execute("DROP TABLE IF EXISTS _ax_g; DROP TABLE IF EXISTS _ax_k")


def _whole_entries(
    con: duckdb.DuckDBPyConnection, a: np.ndarray, b: np.ndarray, out: Pairing
) -> None:
    """The guessed side's entries every line of which matched, and the known sources
    that hold them (a source counted by the entry its first line matched)."""
    import pyarrow as pa

    con.register("_ax_in", pa.table({"a": a, "b": b}))
    try:
        got = con.execute("""
            SELECT g.entry_no, any_value(k.src) FILTER (WHERE g.part = 1) AS src,
                   any_value(k.entry_no) FILTER (WHERE g.part = 1) AS other
            FROM _ax_g g LEFT JOIN _ax_in m ON m.a = g.seq LEFT JOIN _ax_k k ON k.seq = m.b
            GROUP BY g.entry_no HAVING count(m.a) = count(*) ORDER BY g.entry_no""").fetchnumpy()
    finally:
        con.unregister("_ax_in")
    out.mine = got["entry_no"].astype(np.int64)
    out.theirs = got["other"].astype(np.int64)
    srcs, n = np.unique(got["src"].astype(np.int64), return_counts=True)
    out.kept = dict(zip(srcs.tolist(), n.tolist(), strict=True))


def across_note(p: Pairing, sid: int) -> str:
    """What ingest says when a guessed source's entries went."""
    held = " and ".join(f"source {k} ({n:,})" for k, n in sorted(p.kept.items()))
    return (f"{counted(p.merged, 'entry', 'entries')} of source {sid} "
            f"{'is' if p.merged == 1 else 'are'} held by {held} (its lines aligned in order "
            "with their hosts' entries; its host was a guess, from its file's name or none): "
            f"set aside in source {sid}'s dropped entries; `forensics sources restore {sid}` "
            "puts them back")  # fmt: skip
