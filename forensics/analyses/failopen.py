"""Did users still get 200s? The requests answered although their transfer failed or
their bytes mismatched (the `fail_open` view), the ones a retry recovered apart, and the
host pair most of them went through."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..scope import Db, Runs, Scope, scoped


@dataclass
class FailOpen:
    fail_open: int  # answered (ok or corrupted) with a failed transfer or a mismatch
    corrupted: int  # of those, judged corrupted
    transfer_failed: int  # of those, a transfer failure names them
    mismatch: int  # of those, their room's checksum verdict is a bad one
    recovered: int  # failed, then retried under another room that no failure names
    pairs: list[dict] = field(default_factory=list)  # prefill_host, decode_host, requests

    def as_dict(self) -> dict:
        return asdict(self)

    def sentences(self) -> list[str]:
        if not self.fail_open and not self.recovered:
            return []
        out = []
        if self.fail_open:
            top = self.pairs[0]
            out.append(
                f"fail-open: {self.fail_open} requests were answered (status ok or corrupted) "
                f"although their transfer failed ({self.transfer_failed}) or their bytes "
                f"mismatched ({self.mismatch}); {self.corrupted} of them corrupted; most through "
                f"{top['prefill_host']} → {top['decode_host']} ({top['requests']})"
            )
        if self.recovered:
            out.append(f"{self.recovered} requests whose transfer failed were retried under "
                       "another room and recovered (not fail-open)")  # fmt: skip
        return out


def fail_open(db: Db = None, run: Runs = None) -> FailOpen:
    with scoped(db, run) as s:
        return s.memo(("fail_open", tuple(s.runs)), lambda: _fail_open(s))


def _fail_open(s: Scope) -> FailOpen:
    where, params = s.where()
    ((n, k, failed, mismatched, recovered),) = s.con.execute(
        f"""SELECT count(*) FILTER (NOT recovered),
                   count(*) FILTER (NOT recovered AND corrupted),
                   count(*) FILTER (NOT recovered AND transfer_failed),
                   count(*) FILTER (NOT recovered AND mismatch),
                   count(*) FILTER (recovered)
            FROM fail_open WHERE {where}""",
        params,
    ).fetchall()
    pairs = s.con.execute(
        f"""SELECT coalesce(prefill_host, '(unknown)'), coalesce(decode_host, '(unknown)'),
                   count(*) AS n
            FROM fail_open WHERE {where} AND NOT recovered
            GROUP BY ALL ORDER BY n DESC, 1, 2""",
        params,
    ).fetchall()
    rows = [{"prefill_host": p, "decode_host": d, "requests": c} for p, d, c in pairs]
    return FailOpen(n, k, failed, mismatched, recovered, rows)
