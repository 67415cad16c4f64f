"""How far apart are the hosts' clocks? Bounds from causality, per pair of hosts.

The `skew` view (queries/skew.sql) gives, per run and (prefill, decode) host pair, an
upper bound on decode's clock minus prefill's (nothing arrives before it is sent) and,
where decode logged `Receive:` lines, a lower bound (prefill sends only after decode took
the request). This module puts them in words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..scope import Db, Runs, scoped


@dataclass
class HostPairSkew:
    run: str
    src_host: str | None
    dst_host: str | None
    upper_us: int | None  # decode clock − prefill clock < upper_us
    upper_rooms: int
    lower_us: int | None  # decode clock − prefill clock > lower_us
    lower_rooms: int
    resolution_us: int  # the coarser host's time resolution (whole seconds: 1 000 000)
    sentence: str

    @property
    def consistent(self) -> bool:
        return self.lower_us is None or self.upper_us is None or self.lower_us < self.upper_us


@dataclass
class Skew:
    pairs: list[HostPairSkew]

    def as_dict(self) -> dict:
        return {"pairs": [asdict(p) | {"consistent": p.consistent} for p in self.pairs]}

    def sentences(self) -> list[str]:
        return [p.sentence for p in self.pairs] or [
            "no room has both a src and a dst checksum record: no bound on clock skew"
        ]


def skew(db: Db = None, run: Runs = None) -> Skew:
    with scoped(db, run) as s:
        con = s.con
        where, params = s.where()
        rows = con.execute(
            f"""SELECT run, src_host, dst_host, upper_us, upper_rooms, lower_us, lower_rooms,
                       resolution_us
                FROM skew WHERE {where} ORDER BY run, src_host, dst_host""",
            params,
        ).fetchall()
        return Skew([HostPairSkew(*r, sentence=_sentence(*r)) for r in rows])


def ms(us: int) -> str:
    return f"{abs(us) / 1000:.1f} ms"


def _sentence(run, src, dst, upper, n_upper, lower, n_lower, resolution) -> str:
    first = f"at most {ms(upper)} ahead of" if upper >= 0 else f"at least {ms(upper)} behind"
    text = f"{run}: {dst}'s clock is {first} {src}'s"
    why = f"from {n_upper} rooms: nothing is received before it is sent"
    if lower is None:
        return f"{text} ({why}; no decode-side Receive line gives a lower bound)" + _widened(
            resolution
        )
    second = f"at least {ms(lower)} ahead" if lower >= 0 else f"at most {ms(lower)} behind"
    text += (
        f" and {second} ({why}; {n_lower} rooms: prefill sends only after decode took the "
        f"request) — offset between {lower / 1000:+.1f} and {upper / 1000:+.1f} ms"
    )
    if lower >= upper:
        text += "; the bounds contradict each other: a clock stepped or a room id was reused"
    return text + _widened(resolution)


def _widened(resolution: int) -> str:
    if not resolution:
        return ""
    return (f"; times in whole seconds (SGLANG_LOG_MS=1 gives milliseconds): both bounds "
            f"widened by {resolution / 1e6:g} s")  # fmt: skip
