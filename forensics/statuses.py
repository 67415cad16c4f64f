"""The words of an outcome, declared once: a harness result's `status` and a room's
`verdict`, each with one meaning. Every list the analyses, the dashboard and the docs use
derives from these two tables.

A request that got no reply has no outcome; nor has a loaded request of a `--golden` run
whose solo twin never got a reply (`uncompared`): it got a reply, but the one comparison
that could judge it was not made. Both are *unjudged*: left out of every rate and 2×2
table and counted apart. A room is *bad* when its bytes are known to differ from what was
sent; one-sided checksums leave its exposure *unknown*; conflicting records make it
*inconsistent* (neither bad nor good until chosen with `correlate --bad`). Kept free of
imports, so that the analyses that read it do not load the readers to know a few words.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Status:
    name: str
    meaning: str
    replied: bool  # something came back
    judged: bool  # it has a verdict: it counts in rates


@dataclass(frozen=True)
class Verdict:
    name: str
    meaning: str
    exposure: str  # bad | good | unknown | inconsistent


STATUS_TABLE = (
    Status("ok", "a reply, judged intact", True, True),
    Status("corrupted", "a reply, judged corrupted", True, True),
    Status("truncated", "a reply cut short (judged: not corruption)", True, True),
    Status("uncompared", "a reply whose solo twin had none to compare it with", True, False),
    Status("http_error", "no reply: the server answered with an error", False, False),
    Status("timeout", "no reply in time", False, False),
)
# worst first: what makes a room's bytes untrustworthy before what only lost a log line
VERDICT_TABLE = (
    Verdict("conflict", "records of one side disagree with each other", "inconsistent"),
    Verdict("mismatch", "decode received other bytes than prefill sent", "bad"),
    Verdict("stale", "decode received the bytes of an earlier room", "bad"),
    Verdict("partial", "the head matches, the tail or whole differs", "bad"),
    Verdict("missing_dst", "prefill's checksum only: exposure unknown", "unknown"),
    Verdict("missing_src", "decode's checksum only: exposure unknown", "unknown"),
    Verdict(
        "incomparable",
        "the sides digested by different algorithms (probe versions): nothing proven",
        "unknown",
    ),
    Verdict("match", "the bytes arrived intact", "good"),
)

STATUSES = tuple(s.name for s in STATUS_TABLE)
NO_REPLY = tuple(s.name for s in STATUS_TABLE if not s.replied)  # a retry may send it again
UNCOMPARED = "uncompared"
UNJUDGED = tuple(s.name for s in STATUS_TABLE if not s.judged)  # left out of every rate
FAILURES = (*NO_REPLY, "truncated")  # not corruption: nothing, or not all of it, came back
SEVERITY = [v.name for v in VERDICT_TABLE]
BAD_VERDICTS = tuple(v.name for v in VERDICT_TABLE if v.exposure == "bad")
ONE_SIDED = tuple(v.name for v in VERDICT_TABLE if v.exposure == "unknown")


def _in(words: tuple[str, ...], column: str = "status") -> str:
    return f"coalesce({column} IN ({{}}), false)".format(", ".join(f"'{s}'" for s in words))


def unjudged_sql(column: str) -> str:
    """UNJUDGED_SQL over another column (a join's `e.status`)."""
    return _in(UNJUDGED, column)


# SQL over a `status` column (NULL: a reply, judged)
NO_REPLY_SQL = _in(NO_REPLY)  # nothing came back
UNJUDGED_SQL = _in(UNJUDGED)  # no verdict: no reply, or no twin to judge it by
