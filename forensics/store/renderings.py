"""Two sources are one journal only where the entries say so; two logs that only look
alike stay two.

(a) Identity. Entries that both carry journald's identity (export, json, json-seq, binary
    `.journal`) are one entry when boot id, monotonic time, wall time, host and message
    are equal: a host's own journal and journal-remote's copy of it differ in cursor but
    not in these. Entries that differ in them are never one, whatever their text.
(b) Alignment. Where either side lacks that identity (text renderings, plain logs, JSON
    lines), the two are compared per host over their common span (the overlap of their
    first-to-last times on that host, at the coarser resolution) and aligned in order on
    (floored time, identifier, pid, message): an occurrence-numbered join, then the
    longest chain of pairs increasing on both sides (alignment.py). A `[N blob data]`
    message (journalctl without --all) matches any message at its place. They are one
    journal on that host when the chain holds at least SHARE of the smaller side's entries
    in the span and at least MIN_ENTRIES, or every entry of both (two logs identical line
    for line: no content can tell them apart); then exactly the matched entries leave the poorer
    side (at equal richness, the source registered later). Entries outside the span, and
    hosts below the share, stay.
(c) A text rendering's boot comes from `-- Boot … --` markers; where none precedes an entry
    its boot is unknown, and an unknown boot matches any boot.
(d) An entry without a time or a message never matches; a part a format never carries (a
    plain log's pid) is compared as absent on both sides. `cat` (no time) and
    `short-monotonic` (no wall clock) are never merged automatically.
(e) A pair not merged that repeats at least REPEATS_NOTED of the other's entries is said,
    with the command that merges it by the same alignment without the share test
    (`forensics sources dedupe N --against K`; where either side is `cat` or a plain log,
    by its lines whatever their hosts: across.py).
(f) A text log found in a folder whose host is a guess is aligned against every known
    host at once (across.py), after the sources that know their hosts. Every merge
    keeps what it dropped in `dropped_entries` and names the command that puts it back.
(g) Two plain logs (neither a journal rendering) are one journal only with evidence
    beyond their text: sub-second times, or pids or boots, on both sides. Without it they
    are said to repeat each other, never merged on content alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from ..parsers.tables import read_parquet
from ..plural import counted
from .alignment import gaps, longest_chain
from .database import SCHEMA_VERSION, first_row
from .shards import ShardWriter, list_files, source_folder

# rendering -> (richness, resolution in µs; 0: read from the times themselves)
_RICH = (2, 1)
_PRECISE = (1, 1)
_SECONDS = (0, 1_000_000)
RICH = ("export", "json", "json-seq", "journal")
LEVELS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(RICH, _RICH),
    **dict.fromkeys(("short-iso-precise", "short-precise", "short-unix"), _PRECISE),
    **dict.fromkeys(("short", "short-iso", "short-full", "with-unit"), _SECONDS),
}
NEVER = ("cat", "short-monotonic")  # no wall clock: merged only when asked
SHARE = 0.99  # of the smaller side's entries in the span, aligned: one journal
MIN_ENTRIES = 20  # and at least this many aligned
REPEATS_NOTED = 0.2  # a pair not merged that repeats this share of the other: said
BLOB = r"^\[[0-9.]+[KMGT]?B? blob data\]$"  # journalctl without --all


@dataclass
class Side:
    """One source in a comparison: its id, rendering and entries' files."""

    sid: int
    fmt: str
    files: list[Path]
    guessed: bool = False  # its host a guess: aligned across hosts (across.py)

    @property
    def richness(self) -> int:
        return -1 if self.fmt in NEVER else LEVELS.get(self.fmt, (0, 0))[0]


@dataclass
class Pairing:
    """What a comparison found: the rule, the merged pairs (mine, theirs), and per host
    (aligned, mine in the span, theirs in the span, merged)."""

    rule: str
    mine: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    theirs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    hosts: dict[str | None, tuple[int, int, int, bool]] = field(default_factory=dict)
    blobs: int = 0
    kept: dict[int, int] = field(default_factory=dict)  # across hosts: source -> entries

    @property
    def merged(self) -> int:
        return len(self.mine)

    def repeated(self) -> float:
        """The largest share of the other side's entries in a span that aligned on a host
        that was not merged."""
        return max((n / theirs for n, _, theirs, ok in self.hosts.values()
                    if not ok and theirs), default=0.0)  # fmt: skip


def _resolution(con: duckdb.DuckDBPyConnection, side: Side) -> int:
    """A rendering's time resolution; for a form not in LEVELS, read off its times (whole
    seconds, milliseconds or finer)."""
    res = LEVELS.get(side.fmt, (0, 0))[1]
    if res:
        return res
    row = first_row(
        con,
        f"""SELECT bool_and(ts_us % 1000000 = 0), bool_and(ts_us % 1000 = 0)
                             FROM {read_parquet(side.files)} WHERE ts_us IS NOT NULL""",
    )
    if row is None or row[0] is None:
        return 1
    return 1_000_000 if row[0] else 1000 if row[1] else 1


def compare(
    con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side, forced: bool = False
) -> Pairing:
    """The entries of `mine` that `theirs` holds, by the rule that applies to the pair;
    `forced`: without the share test (and for `cat`/`short-monotonic`, by message alone)."""
    if not mine.files or not theirs.files:
        return Pairing("none")
    if mine.fmt in RICH and theirs.fmt in RICH:
        return _identity(con, mine, theirs)
    if mine.fmt in NEVER or theirs.fmt in NEVER:
        return _aligned(con, mine, theirs, 0, forced=True) if forced else Pairing("none")
    res = max(_resolution(con, mine), _resolution(con, theirs))
    if forced or mine.fmt in LEVELS or theirs.fmt in LEVELS or _evidence(con, mine, theirs, res):
        return _aligned(con, mine, theirs, res, forced)
    p = _aligned(con, mine, theirs, res, forced, merge=False)
    p.rule = "unproven"
    return p


def _evidence(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side, res: int) -> bool:
    """(g): whether two plain logs share something beyond their text that one journal
    would carry: sub-second times, pids or boots on both sides. Two replicas' idle logs
    (a health check and a batch line a second, identical) look like one journal by
    content alone."""
    if res < 1_000_000:
        return True
    got = [first_row(con, f"SELECT count(pid) > 0, count(boot_id) > 0 FROM "
                          f"{read_parquet(side.files)}") for side in (mine, theirs)]  # fmt: skip
    return bool(got[0] and got[1] and ((got[0][0] and got[1][0]) or (got[0][1] and got[1][1])))


_ID = ("boot_id", "mono_us", "ts_us", "host")  # and the message, by its hash


def _identity(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side) -> Pairing:
    """(a): entries equal in boot, monotonic and wall time, host and message; a copy an
    entry's own source repeats is matched once (occurrence-numbered). The message is
    compared by its 64-bit hash beside the other parts compared exactly: the messages
    themselves are never copied (a second copy of both sources' text cost 40 % of the
    time and half the memory)."""
    known = " AND ".join(f"{c} IS NOT NULL" for c in ("boot_id", "mono_us", "ts_us", "message"))
    parts = ", ".join(_ID)
    for name, side in (("_id_n", mine), ("_id_o", theirs)):  # each side read once
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {name} AS
                        SELECT entry_no, {parts}, hash({parts}, message) AS h
                        FROM {read_parquet(side.files)} WHERE {known}""")
    numbered = ("(SELECT *, row_number() OVER (PARTITION BY h ORDER BY entry_no) AS occ "
                "FROM {} SEMI JOIN {} USING (h))")  # fmt: skip
    eq = " AND ".join(f"n.{c} IS NOT DISTINCT FROM o.{c}" for c in _ID)
    try:
        got = con.sql(f"""SELECT n.entry_no AS a, o.entry_no AS b
                          FROM {numbered.format("_id_n", "_id_o")} n
                          JOIN {numbered.format("_id_o", "_id_n")} o
                            ON n.h = o.h AND n.occ = o.occ AND {eq} ORDER BY 1""").fetchnumpy()
    finally:
        con.execute("DROP TABLE IF EXISTS _id_n; DROP TABLE IF EXISTS _id_o")
    return Pairing("identity", got["a"].astype(np.int64), got["b"].astype(np.int64))


_BLOB_LIKE = "message LIKE '[%blob data]'"  # a cheap test before BLOB's


def _timed(files: list[Path], res: int) -> str:
    """A side's entries that can match: with a time (unless by message alone) and a
    message."""
    when = "ts_us IS NOT NULL AND " if res else ""
    return f"(SELECT * FROM {read_parquet(files)} WHERE {when}message IS NOT NULL)"


def _spans(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side, res: int) -> None:
    """`_al_span`: per host, the common span of the two sides' times (floored at `res`;
    by message alone, one span over everything)."""
    if not res:
        con.execute("CREATE OR REPLACE TEMP TABLE _al_span AS SELECT NULL::VARCHAR AS host, "
                    "0::BIGINT AS lo, 0::BIGINT AS hi")  # fmt: skip
        return
    ends = "SELECT host, min(ts_us // {r}) AS lo, max(ts_us // {r}) AS hi FROM {f} GROUP BY 1"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _al_span AS
                    SELECT n.host, greatest(n.lo, o.lo) AS lo, least(n.hi, o.hi) AS hi
                    FROM ({ends.format(r=res, f=_timed(mine.files, res))}) n
                    JOIN ({ends.format(r=res, f=_timed(theirs.files, res))}) o
                      ON n.host IS NOT DISTINCT FROM o.host
                    WHERE greatest(n.lo, o.lo) <= least(n.hi, o.hi)""")


def _numbered(files: list[Path], res: int, name: str) -> str:
    """A temp table of a side's entries in the common span (`_al_span`): floored time, the
    line's hash (by message alone when `res` is 0) and its occurrence within it, whether it
    is a blob. Only what the span needs is read (the times' row-group statistics skip the
    rest), and the messages are not copied."""
    if res:
        t, what = f"x.ts_us // {res}", "x.host, x.ident, x.pid, x.message"
        cut = (f" AND x.ts_us >= s.lo * {res} AND x.ts_us < (s.hi + 1) * {res}"
               " AND x.host IS NOT DISTINCT FROM s.host")  # fmt: skip
        host = "x.host"
    else:
        t, what, cut, host = "0", "x.message", "", "NULL::VARCHAR"
    return f"""CREATE OR REPLACE TEMP TABLE {name} AS
               SELECT x.entry_no, {host} AS host, {t} AS t, x.ident, x.pid, x.boot_id,
                      hash({t}, {what}) AS h,
                      x.{_BLOB_LIKE} AND regexp_matches(x.message, '{BLOB}') AS blob,
                      row_number() OVER (PARTITION BY hash({t}, {what})
                                         ORDER BY x.entry_no) AS occ
               FROM {_timed(files, res)} x JOIN _al_span s ON TRUE{cut}"""


def _aligned(
    con: duckdb.DuckDBPyConnection,
    mine: Side,
    theirs: Side,
    res: int,
    forced: bool,
    merge: bool = True,
) -> Pairing:
    """(b)–(d): per host over the common span, the longest in-order chain of matched
    entries; merged where it holds SHARE of the smaller side (or `forced`), and `merge`."""
    _spans(con, mine, theirs, res)
    con.execute(_numbered(mine.files, res, "_al_n"))
    con.execute(_numbered(theirs.files, res, "_al_o"))
    try:
        found = _candidates(con, res)
        counts = _span_counts(con)
        blobs = {h for (h,) in con.execute(  # the hosts a blob's place is looked up on
            "SELECT DISTINCT host FROM (SELECT host FROM _al_n WHERE blob "
            "UNION ALL SELECT host FROM _al_o WHERE blob)").fetchall()}  # fmt: skip
        out = Pairing("alignment")
        mine_no, theirs_no = [], []
        for host, (n_mine, n_theirs) in counts.items():
            new, old = found.get(host, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            keep = longest_chain(new, old)
            new, old = new[keep], old[keep]
            if host in blobs:
                new, old, filled = _fill_blobs(con, host, new, old)
                out.blobs += filled
            ok = forced or (merge and one_journal(len(new), n_mine, n_theirs))
            out.hosts[host] = (len(new), n_mine, n_theirs, ok and len(new) > 0)
            if ok:
                mine_no.append(new)
                theirs_no.append(old)
        if mine_no:
            out.mine, out.theirs = np.concatenate(mine_no), np.concatenate(theirs_no)
        return out
    finally:
        con.execute("DROP TABLE IF EXISTS _al_n; DROP TABLE IF EXISTS _al_o; "
                    "DROP TABLE IF EXISTS _al_span")  # fmt: skip


def one_journal(aligned: int, mine: int, theirs: int) -> bool:
    """The share test: SHARE of the smaller side and MIN_ENTRIES aligned, or the two
    identical line for line over the span (no content tells them apart)."""
    if aligned and aligned == mine == theirs:
        return True
    return aligned >= MIN_ENTRIES and aligned >= SHARE * min(mine, theirs)


def _candidates(con: duckdb.DuckDBPyConnection, res: int) -> dict:
    """host -> (mine's entry numbers, theirs') of the occurrence-numbered join: the same
    line hash (time, host, identifier, pid, message) and occurrence, the parts compared
    again exactly but the message (its hash), boots that do not differ."""
    eq = ("n.host IS NOT DISTINCT FROM o.host AND n.t = o.t AND n.ident IS NOT DISTINCT FROM "
          "o.ident AND n.pid IS NOT DISTINCT FROM o.pid AND " if res else "")  # fmt: skip
    got = con.sql(f"""SELECT n.host, n.entry_no AS a, o.entry_no AS b
                      FROM _al_n n JOIN _al_o o ON n.h = o.h AND n.occ = o.occ AND {eq}
                           (n.boot_id IS NULL OR o.boot_id IS NULL OR n.boot_id = o.boot_id)
                      """).pl()  # fmt: skip (unsorted: the chain sorts each host's pairs)
    out: dict = {}
    for (host,), part in got.group_by("host", maintain_order=True):
        out[host] = (part["a"].to_numpy().astype(np.int64), part["b"].to_numpy().astype(np.int64))
    return out


def _span_counts(con: duckdb.DuckDBPyConnection) -> dict:
    rows = con.execute("""SELECT coalesce(n.host, o.host), coalesce(n.k, 0), coalesce(o.k, 0)
                          FROM (SELECT host, count(*) AS k FROM _al_n GROUP BY 1) n
                          FULL JOIN (SELECT host, count(*) AS k FROM _al_o GROUP BY 1) o
                            ON n.host IS NOT DISTINCT FROM o.host""").fetchall()
    return {h: (a, b) for h, a, b in rows}


def _fill_blobs(
    con: duckdb.DuckDBPyConnection, host, new: np.ndarray, old: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """A `[N blob data]` entry matches the entry at its place on the other side: in a gap
    of the chain that holds as many unmatched entries on both sides, the k-th with the
    k-th, where their time, identifier and pid agree and either is a blob."""
    sides = []
    for name in ("_al_n", "_al_o"):
        sides.append(con.execute(f"""SELECT entry_no, t, ident, pid, blob FROM {name}
                                     WHERE host IS NOT DISTINCT FROM ? ORDER BY entry_no""",
                                 [host]).fetchall())  # fmt: skip
    if not any(r[4] for side in sides for r in side):
        return new, old, 0
    rows = [{r[0]: r for r in side} for side in sides]
    free = [np.array(sorted(set(rows[i]) - set(links.tolist())), np.int64)
            for i, links in enumerate((new, old))]  # fmt: skip
    add_new, add_old = [], []
    for a, b in gaps(new, old, free[0], free[1]):
        for x, y in zip(a.tolist(), b.tolist(), strict=True):
            ra, rb = rows[0][x], rows[1][y]
            if ra[1:4] == rb[1:4] and (ra[4] or rb[4]):
                add_new.append(x)
                add_old.append(y)
    if not add_new:
        return new, old, 0
    order = np.argsort(np.concatenate([new, add_new]))
    return (np.concatenate([new, add_new])[order], np.concatenate([old, add_old])[order],
            len(add_new))  # fmt: skip


def _dedupe_cmd(mine: Side, theirs: Side) -> str:
    """The command that merges a pair: the poorer side's copies go (at equal richness,
    the later source's, `mine`)."""
    poor, rich = (theirs, mine) if theirs.richness < mine.richness else (mine, theirs)
    return f"`forensics sources dedupe {poor.sid} --against {rich.sid}`"


# what a merge note says of each rule
HOW = {
    "identity": "the same boot, monotonic and wall time, host and message",
    "alignment": "aligned in order, line for line",
    "across": "its lines aligned in order with each host's entries; its host was a guess",
}


def notes_for(p: Pairing, mine: Side, theirs: Side, dropped_from: int) -> list[str]:
    """What ingest says of one comparison: a merge and how to undo it, or a pair that
    repeats much of the other and how to merge it."""
    me, other = mine.sid, theirs.sid
    out = []
    if p.merged:
        how = HOW[p.rule]
        kept = other if dropped_from == me else me
        out.append(f"{counted(p.merged, 'entry', 'entries')} of source {dropped_from} "
                   f"{'is' if p.merged == 1 else 'are'} source {kept}'s "
                   f"({how}): set aside in source {dropped_from}'s dropped entries; "
                   f"`forensics sources restore {dropped_from}` puts them back")  # fmt: skip
    if p.blobs:
        out.append(f"{counted(p.blobs, '`[… blob data]` message')} (journalctl without "
                   "--all) matched the entry at its place")  # fmt: skip
    share = p.repeated()
    if share >= REPEATS_NOTED and p.rule == "unproven":
        out.append(f"source {me} repeats {100 * share:.0f} % of source {other}'s entries in "
                   "their common span, but two plain logs with no sub-second time, pid or "
                   "boot in common cannot be told from two replicas' logs: both kept; "
                   f"{_dedupe_cmd(mine, theirs)} merges them")  # fmt: skip
    elif share >= REPEATS_NOTED:
        out.append(f"source {me} repeats {100 * share:.0f} % of source {other}'s entries in "
                   f"their common span, short of one journal ({100 * SHARE:.0f} % of the smaller "
                   f"side in order and {MIN_ENTRIES} entries, or every line): "
                   f"both kept; {_dedupe_cmd(mine, theirs)} merges them")  # fmt: skip
    return out


def repeats(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side) -> list[str]:
    """A note where `mine` repeats much of `theirs`'s messages but no rule aligns them
    (`cat`, `short-monotonic`, a plain log beside its unit's journal)."""
    row = first_row(
        con,
        f"""SELECT count(*) FILTER (WHERE o.h IS NOT NULL), count(*)
            FROM (SELECT hash(message) AS h FROM {read_parquet(mine.files)}) n
            LEFT JOIN (SELECT DISTINCT hash(message) AS h FROM {read_parquet(theirs.files)}) o
              ON n.h = o.h""",
    )
    same, total = row or (0, 0)
    if not total or same / total < REPEATS_NOTED:
        return []
    how = f"{_dedupe_cmd(mine, theirs)} merges them"
    return [f"source {mine.sid} repeats {100 * same / total:.0f} % of source {theirs.sid} "
            f"(renderings that cannot be matched entry for entry; {how}); counts may "
            "double"]  # fmt: skip


def offset(con: duckdb.DuckDBPyConnection, mine: Side, theirs: Side) -> list[str]:
    """Nothing matched: do most lines match at a whole number of hours apart (a rendering
    in a local time zone)? Said, not mended: the times as read are kept."""
    one = "SELECT host, ident, pid, message, any_value(ts_us) AS ts_us FROM {} " \
          "WHERE ts_us IS NOT NULL GROUP BY ALL HAVING count(*) = 1"  # fmt: skip
    a, b = read_parquet(mine.files), read_parquet(theirs.files)
    row = first_row(
        con,
        f"""SELECT round((n.ts_us - o.ts_us) / 3.6e9)::BIGINT AS h, count(*) AS k,
                   (SELECT count(*) FROM {a}) AS total
            FROM ({one.format(a)}) n JOIN ({one.format(b)}) o USING (host, ident, pid, message)
            GROUP BY 1 ORDER BY 2 DESC LIMIT 1""",
    )
    if row is None or not row[0] or row[1] < max(1, row[2] // 2):
        return []
    return [f"source {mine.sid} matches source {theirs.sid} only {row[0]:+d} h apart "
            f"({row[1]:,} lines): a rendering in a local time zone? Not deduped; counts "
            "may double"]  # fmt: skip


def take_from(con: duckdb.DuckDBPyConnection, root: Path, sid: int, numbers: np.ndarray,
              split) -> None:  # fmt: skip
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
    dups(con, numbers)
    split(con, writer)
    for table, names in writer.files.items():
        if names == before.get(table):
            continue
        for name in before.get(table, []):
            rel = (folder / name).relative_to(root).as_posix()
            con.execute("DELETE FROM shards WHERE path = ?", [rel])
        list_files(con, root, sid, table, [folder / x for x in names])
    n = len(numbers)
    con.execute("UPDATE sources SET entries = entries - ?, duplicates = duplicates + ? "
                "WHERE source_id = ?", [n, n, sid])  # fmt: skip


def dups(con: duckdb.DuckDBPyConnection, numbers: np.ndarray) -> None:
    """`_dups`: the entry numbers a split takes out."""
    con.execute("CREATE OR REPLACE TEMP TABLE _dups (entry_no BIGINT)")
    if len(numbers):
        batch = pl.DataFrame({"entry_no": np.unique(numbers).astype(np.int64)}).to_arrow()
        con.register("_dups_in", batch)
        con.execute("INSERT INTO _dups SELECT entry_no FROM _dups_in")
        con.unregister("_dups_in")
