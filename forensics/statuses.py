"""What a harness result's `status` says (results files, `forensics repro`, the analyses).

A request that got no reply has no outcome: rates and 2×2 tables leave it out and count
it apart. Kept in a module of its own, free of imports, so that the analyses that read it
do not load the readers (pyarrow, polars) to know four words.
"""

UNJUDGED = ("http_error", "timeout")  # no reply to judge
FAILURES = (*UNJUDGED, "truncated")  # not corruption: nothing, or not all of it, came back
STATUSES = ("ok", "corrupted", *FAILURES)
# SQL over a `status` column: the request had no reply (NULL status: a reply, judged)
NO_REPLY_SQL = "coalesce(status IN ({}), false)".format(", ".join(f"'{s}'" for s in UNJUDGED))
