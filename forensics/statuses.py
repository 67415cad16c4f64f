"""What a harness result's `status` says (results files, `forensics repro`, the analyses).

A request that got no reply has no outcome: rates and 2×2 tables leave it out and count
it apart. So does a loaded request of a `--golden` run whose solo twin never got a reply
(`uncompared`): the one comparison that could judge it was not made. Kept in a module of
its own, free of imports, so that the analyses that read it do not load the readers
(pyarrow, polars) to know a few words.
"""

NO_REPLY = ("http_error", "timeout")  # nothing came back: a retry may send it again
UNCOMPARED = "uncompared"  # a reply, but its solo twin had none to compare it with
UNJUDGED = (*NO_REPLY, UNCOMPARED)  # no verdict: left out of every rate
FAILURES = (*NO_REPLY, "truncated")  # not corruption: nothing, or not all of it, came back
STATUSES = ("ok", "corrupted", UNCOMPARED, *FAILURES)
# SQL over a `status` column: the request has no verdict (NULL status: a reply, judged)
NO_REPLY_SQL = "coalesce(status IN ({}), false)".format(", ".join(f"'{s}'" for s in UNJUDGED))
