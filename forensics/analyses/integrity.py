"""Did the bytes arrive intact, by every check that looked: the `integrity` view's records
(the probes, SGLang's KV checksum and metadata room check, a vLLM connector's checksum,
vLLM-Ascend's DFX content checks, Mooncake Store's code, the harness's error bodies)
turned into each judged request's verdict by each check.

A request is `verified` by a check only where the check is known to be on for its
decode host — its flag in the server arguments (`checks` rows with verdict on) or the
check logs each pass (a verified record there) — and no mismatch or skip names it; a
skip that names no request (SGLang's layout-signature skip) leaves its host's requests
`not_verified`; a check not known on leaves them `not_verified` ("not known on"). The
probes verify a request whose room's checksums match on both sides. Records that name
no request (Mooncake Store's) are counted per host and time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from ..scope import Db, Runs, Scope, scoped
from ..statuses import BAD_VERDICTS, unjudged_sql

NOT_ON = "not known on"
SKIPPED = "a skip on its host names no request"


@dataclass
class CheckCount:
    checker: str
    records: int  # its rows in the `integrity` view (a harness's 500s name unjudged requests)
    verified: int
    mismatch: int
    not_verified: int
    why_not: dict[str, int] = field(default_factory=dict)  # reason -> requests
    false_positive: list[dict] = field(default_factory=list)  # mismatches it may explain
    unnamed: list[dict] = field(default_factory=list)  # host, records, first/last µs


@dataclass
class Integrity:
    requests: int
    checks: list[CheckCount]
    passed_corrupted: int  # corrupted requests a check verified: the bytes arrived intact

    def as_dict(self) -> dict:
        return asdict(self)

    def sentences(self) -> list[str]:
        out = []
        for c in self.checks:
            why = "; ".join(f"{r}: {n}" for r, n in sorted(c.why_not.items()))
            said = f" ({why})" if why else ""
            out.append(
                f"integrity ({c.checker}, {c.records:,} records): of {self.requests:,} judged "
                f"requests {c.verified:,} verified, {c.mismatch:,} mismatched, "
                f"{c.not_verified:,} not verified{said}"
            )
            if c.false_positive:
                out.append(f"{len(c.false_positive)} {c.checker} mismatches may be false "
                           f"positives: {c.false_positive[0]['note']}")  # fmt: skip
            for u in c.unnamed:
                out.append(f"{c.checker}: {u['records']} records on {u['host']} name no "
                           "request (counted by host and time)")  # fmt: skip
        if self.passed_corrupted:
            out.append(
                f"{self.passed_corrupted} corrupted requests passed a KV check: their bytes "
                "arrived intact, so look at decode-side writes (the page canary)"
            )
        return out


def integrity(db: Db = None, run: Runs = None) -> Integrity:
    with scoped(db, run) as s:
        return s.memo(("integrity", tuple(s.runs)), lambda: _integrity(s))


def _integrity(s: Scope) -> Integrity:
    fwhere, fparams = s.where_followed()
    records = s.con.execute(
        f"""SELECT checker, verdict, rid, room, host, reason, known_false_positive, ts_us
            FROM integrity WHERE {fwhere}""",
        fparams,
    ).fetchall()
    on = s.con.execute(
        f"SELECT DISTINCT checker, host FROM checks WHERE {fwhere} AND verdict = 'on'", fparams
    ).fetchall()
    where, params = s.where("e.run")
    if not records and not on:  # no check looked: the requests' evidence is not read
        (n,) = s.con.execute(
            f"SELECT count(*) FROM results e WHERE {where} AND NOT {unjudged_sql('e.status')}",
            params,
        ).fetchall()[0]
        return Integrity(n, [], 0)
    judged = unjudged_sql("e.status")
    reqs = s.con.execute(
        f"""SELECT e.rid, e.room, e.decode_host, e.corrupted, r.verdict
            FROM request_evidence e JOIN requests r USING (source_id, line)
            WHERE {where} AND NOT {judged}""",
        params,
    ).fetchall()
    checks = [_Check(c, records, on) for c in sorted({r[0] for r in records} | {c for c, _ in on})]
    counts = [c.count(reqs) for c in checks]
    passed = sum(1 for req in reqs if req[3] and any(c.verdict(req)[0] == "verified"
                                                      for c in checks))  # fmt: skip
    return Integrity(len(reqs), counts, passed)


class _Check:
    """One check's records, indexed by the request and room they name."""

    def __init__(self, name: str, records: list, on: list) -> None:
        self.name = name
        self.mine = [r for r in records if r[0] == name]
        self.by_rid: dict[str, list] = {}
        self.by_room: dict[int, list] = {}
        for r in self.mine:
            if r[2] is not None:
                self.by_rid.setdefault(r[2], []).append(r)
            if r[3] is not None:
                self.by_room.setdefault(r[3], []).append(r)
        # on for a host: its flag, or a pass it logged
        self.on = {h for c, h in on if c == name} | {r[4] for r in self.mine if r[1] == "verified"}
        self.skipped = {r[4] for r in self.mine
                        if r[1] == "not_verified" and r[2] is None and r[3] is None}  # fmt: skip

    def verdict(self, req: tuple) -> tuple[str, str]:
        """A request's verdict by this check, and why where it is not verified."""
        rid, room, host, _bad, room_verdict = req
        if self.name == "probes":
            if room_verdict in BAD_VERDICTS:
                return "mismatch", room_verdict
            if room_verdict == "match":
                return "verified", ""
            return "not_verified", room_verdict or "no checksum record"
        named = [*self.by_rid.get(rid, ()), *self.by_room.get(room, ())]
        if any(r[1] == "mismatch" for r in named):
            return "mismatch", ""
        if skipped := [r for r in named if r[1] == "not_verified"]:
            return "not_verified", skipped[0][5] or "not verified"
        if host not in self.on:
            return "not_verified", NOT_ON
        if host in self.skipped:
            return "not_verified", SKIPPED
        return "verified", ""

    def count(self, reqs: list) -> CheckCount:
        verdicts: Counter = Counter()
        why: Counter = Counter()
        for req in reqs:
            v, reason = self.verdict(req)
            verdicts[v] += 1
            if v == "not_verified":
                why[reason] += 1
        fp = [{"rid": r[2], "room": r[3], "note": r[6]}
              for r in self.mine if r[1] == "mismatch" and r[6]]  # fmt: skip
        loose = [r for r in self.mine if r[2] is None and r[3] is None and r[1] == "mismatch"]
        hosts = sorted({r[4] for r in loose if r[4] is not None})
        unnamed = [{"host": h, "records": sum(1 for r in loose if r[4] == h),
                    "first_us": min(r[7] for r in loose if r[4] == h),
                    "last_us": max(r[7] for r in loose if r[4] == h)} for h in hosts]  # fmt: skip
        return CheckCount(self.name, len(self.mine), verdicts["verified"], verdicts["mismatch"],
                          verdicts["not_verified"], dict(why), fp, unnamed)  # fmt: skip
