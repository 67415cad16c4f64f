"""One journal in two renderings is one set of entries.

Exact dedupe (register.drop_duplicates) compares an entry's whole identity: it holds
between export, json and binary (one cursor) and between text renderings of one
resolution. A text rendering carries no cursor, boot or monotonic time, and some carry
whole seconds only, so beside a richer rendering of the same journal nothing matched and
every count doubled. Here two sources of different richness are matched on what both
carry: time floored to the coarser resolution, host, identifier, pid and message, as a
multiset (a line a source really repeats stays). The richer rendering's entries are
kept whichever came first: a poorer one arriving later drops its copies; a richer one
arriving later takes them from the poorer source registered before (its files written
anew, the copies kept in its `dropped_entries`, so removing the richer one restores them).

Renderings the rule cannot match (`cat`: no time or host; `short-monotonic`: no wall
clock; plain logs: another process's framing) are named, not deduped: ingest says how
much of an earlier source the new one repeats.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from ..parsers.tables import read_parquet
from .database import SCHEMA_VERSION, first_row, scalar
from .shards import ShardWriter, list_files, source_folder

# rendering -> (richness, resolution in µs): the richer keeps its entries
_RICH = (2, 1)
_PRECISE = (1, 1)
_SECONDS = (0, 1_000_000)
LEVELS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(("export", "json", "json-seq", "journal"), _RICH),
    **dict.fromkeys(("short-iso-precise", "short-precise", "short-unix"), _PRECISE),
    **dict.fromkeys(("short", "short-iso", "short-full", "with-unit"), _SECONDS),
}
REPEATS_NOTED = 0.2  # a share of repeated messages worth a note where no rule matches
_WHAT = "host, ident, pid, message"


def _numbered(files: list[Path], res: int) -> str:
    """Entries with their loose identity's hash and their occurrence within it."""
    k = f"hash(ts_us // {res}, {_WHAT})"
    return f"""(SELECT entry_no, ts_us // {res} AS t, {_WHAT}, {k} AS k,
                       row_number() OVER (PARTITION BY {k} ORDER BY entry_no) AS occ
                FROM {read_parquet(files)} WHERE ts_us IS NOT NULL)"""


def matches(new: list[Path], old: list[Path], res: int) -> str:
    """SQL of (new_no, old_no): the new entries the old source holds too, one for one."""
    eq = " AND ".join(f"n.{c} IS NOT DISTINCT FROM o.{c}" for c in _WHAT.split(", "))
    return f"""SELECT n.entry_no AS new_no, o.entry_no AS old_no
               FROM {_numbered(new, res)} n JOIN {_numbered(old, res)} o
                 ON n.k = o.k AND n.occ = o.occ AND n.t = o.t AND {eq}"""


def _registered(con: duckdb.DuckDBPyConnection, damaged: set[int]) -> list[tuple[int, str]]:
    rows = con.execute("SELECT source_id, format FROM sources ORDER BY source_id").fetchall()
    return [(sid, fmt) for sid, fmt in rows if sid not in damaged]


def _entry_files(con: duckdb.DuckDBPyConnection, root: Path, sid: int) -> list[Path]:
    return [root / p for (p,) in con.execute(
        "SELECT path FROM shards WHERE source_id = ? AND table_name = 'entries' ORDER BY path",
        [sid]).fetchall()]  # fmt: skip


def across(
    con: duckdb.DuckDBPyConnection,
    writer: ShardWriter,
    fmt: str,
    root: Path,
    damaged: set[int],
    split,
    me: int,
) -> tuple[int, list[str]]:
    """Match the staged source (`writer`, rendering `fmt`) with every registered source
    of another richness: its own copies dropped (`split` them out), or the registered
    source's. (entries the staged source dropped, notes)."""
    if not writer.paths("entries"):
        return 0, []
    level = LEVELS.get(fmt)
    dropped, notes = 0, []
    for sid, other in _registered(con, damaged):
        theirs = _entry_files(con, root, sid)
        if not theirs or other == fmt:
            continue
        if level is None or LEVELS.get(other) is None:
            notes += _repeats(con, writer.paths("entries"), theirs, me, sid)
        elif LEVELS[other][0] != level[0]:  # one richness: the exact identity matched them
            n, said = _pair(con, writer, root, split, (me, level), (sid, LEVELS[other], theirs))
            dropped, notes = dropped + n, [*notes, *said]
    con.execute("DROP TABLE IF EXISTS _pairs")
    return dropped, notes


def _pair(con, writer: ShardWriter, root: Path, split, new: tuple, old: tuple) -> tuple:
    """One registered source of another richness against the staged one: (entries the
    staged one dropped, notes). `new`: (source id, (richness, resolution)); `old` the
    same and its entries' files."""
    (me, (rich, res)), (sid, (their_rich, their_res), theirs) = new, old
    mine = writer.paths("entries")
    sql = matches(mine, theirs, max(res, their_res))
    con.execute(f"CREATE OR REPLACE TEMP TABLE _pairs AS {sql}")
    n = scalar(con, "SELECT count(*) FROM _pairs")
    poorer_is_new = rich < their_rich
    notes = _blobs(con, mine if poorer_is_new else theirs, "new_no" if poorer_is_new
                   else "old_no", me if poorer_is_new else sid)  # fmt: skip
    if not n:
        return 0, notes + _offset(con, mine, theirs, me, sid)
    if not poorer_is_new:
        _take_from(con, root, sid, split)
        return 0, [*notes, f"{n:,} entries of source {sid} are this one's in a poorer "
                   "rendering: these kept (cursor, boot, monotonic time), its copies set "
                   "aside"]  # fmt: skip
    con.execute("CREATE OR REPLACE TEMP TABLE _dups AS SELECT new_no AS entry_no FROM _pairs")
    split(con, writer)  # this one is the poorer: its copies go
    return n, [*notes, f"{n:,} entries are source {sid}'s in another rendering: dropped "
               "here, that richer one kept"]  # fmt: skip


def _take_from(con: duckdb.DuckDBPyConnection, root: Path, sid: int, split) -> None:
    """The registered source's matched entries (and their records) out of its listed
    files into its `dropped_entries`; its files written anew beside the old ones (those
    unlisted in this transaction, removed by the next writer's sweep)."""
    folder = source_folder(root, sid)
    writer = ShardWriter(folder, SCHEMA_VERSION)
    writer.keep = True
    for table, path in con.execute(
        "SELECT table_name, path FROM shards WHERE source_id = ? ORDER BY path", [sid]
    ).fetchall():
        writer.files.setdefault(table, []).append(Path(path).name)
    before = {t: list(f) for t, f in writer.files.items()}
    con.execute("CREATE OR REPLACE TEMP TABLE _dups AS SELECT old_no AS entry_no FROM _pairs")
    n = scalar(con, "SELECT count(*) FROM _dups")
    split(con, writer)
    for table, names in writer.files.items():
        if names == before.get(table):
            continue
        for name in before.get(table, []):
            rel = (folder / name).relative_to(root).as_posix()
            con.execute("DELETE FROM shards WHERE path = ?", [rel])
        list_files(con, root, sid, table, [folder / x for x in names])
    con.execute("UPDATE sources SET entries = entries - ?, duplicates = duplicates + ? "
                "WHERE source_id = ?", [n, n, sid])  # fmt: skip


BLOB = r"^\[[0-9.]+[KMGT]?B? blob data\]$"  # journalctl without --all


def _blobs(con: duckdb.DuckDBPyConnection, files: list[Path], side: str, sid: int) -> list[str]:
    """The poorer rendering's `[N blob data]` entries (journalctl without --all) that
    matched nothing: named, since their richer copies stay too."""
    n = scalar(
        con,
        f"""SELECT count(*) FROM {read_parquet(files)}
            WHERE regexp_matches(message, '{BLOB}')
              AND entry_no NOT IN (SELECT {side} FROM _pairs)""",
    )
    if not n:
        return []
    return [f"source {sid} shows {n:,} messages as `[… blob data]` (journalctl without "
            "--all): they match no other rendering, and counts may double"]  # fmt: skip


def _offset(
    con: duckdb.DuckDBPyConnection, mine: list[Path], theirs: list[Path], me: int, sid: int
) -> list[str]:
    """Nothing matched: do most lines match at a whole number of hours apart (a rendering
    in a local time zone)? Said, not mended: the times as read are kept."""
    one = "SELECT host, ident, pid, message, any_value(ts_us) AS ts_us FROM {} " \
          "WHERE ts_us IS NOT NULL GROUP BY ALL HAVING count(*) = 1"  # fmt: skip
    row = first_row(
        con,
        f"""SELECT round((n.ts_us - o.ts_us) / 3.6e9)::BIGINT AS h, count(*) AS k,
                   (SELECT count(*) FROM {read_parquet(mine)}) AS total
            FROM ({one.format(read_parquet(mine))}) n
            JOIN ({one.format(read_parquet(theirs))}) o USING (host, ident, pid, message)
            GROUP BY 1 ORDER BY 2 DESC LIMIT 1""",
    )
    if row is None or not row[0] or row[1] < max(1, row[2] // 2):
        return []
    return [f"source {me} matches source {sid} only {row[0]:+d} h apart ({row[1]:,} lines): "
            "a rendering in a local time zone? Not deduped; counts may double"]  # fmt: skip


def _repeats(
    con: duckdb.DuckDBPyConnection, mine: list[Path], theirs: list[Path], me: int, sid: int
) -> list[str]:
    """A note where the new source repeats much of a registered one no rule can match."""
    row = first_row(
        con,
        f"""SELECT count(*) FILTER (WHERE o.h IS NOT NULL), count(*)
            FROM (SELECT hash(message) AS h FROM {read_parquet(mine)}) n
            LEFT JOIN (SELECT DISTINCT hash(message) AS h FROM {read_parquet(theirs)}) o
              ON n.h = o.h""",
    )
    same, total = row or (0, 0)
    if not total or same / total < REPEATS_NOTED:
        return []
    return [f"source {me} repeats {100 * same / total:.0f} % of source {sid} (renderings that "
            "cannot be matched entry for entry); counts may double"]  # fmt: skip
