"""Which pair: the judged requests of each prefill host × decode host pair (and of each
RDMA NIC pair Mooncake's failures name), with their corrupted requests, transfer failures
and integrity mismatches, ranked by the Wilson 95 % lower bound of the corruption rate —
never the raw rate, which a pair of three requests would top.

A request's pair is its room's two sides (request_evidence: the lines or records naming
it on each host, decode's `Receive` naming its `bootstrap_host`); a side not known makes
the pair `(unknown)`, a row of its own. The agents and engines lines name (NIXL's remote
agent, an engine id) are rows too, where named: a request's is the value a line about it
names (suspects' named values — as ingest stored them for the default scope).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..scope import Db, Runs, Scope, scoped
from ..statuses import BAD_VERDICTS, UNJUDGED_SQL
from .stats import wilson

UNKNOWN = "(unknown)"
COMPONENT_NAMES = ("agent", "remote_agent", "engine", "engine_id", "remote_engine_id")
NO_NIC_PAIR = "(none)"  # request_features.nic_pair where no failure names one


@dataclass
class Pair:
    prefill_host: str
    decode_host: str
    requests: int
    corrupted: int
    failures: int  # its own transfer failed (a line names it)
    mismatches: int  # its room's checksum verdict is a bad one (probes)
    rate: float
    rate_low: float  # Wilson 95 % lower bound
    rate_high: float


@dataclass
class NicPair:
    nic_pair: str
    requests: int
    corrupted: int
    rate: float
    rate_low: float
    rate_high: float


@dataclass
class Component:
    name: str  # agent, remote_agent, engine, engine_id, remote_engine_id: as the lines say
    value: str
    requests: int  # judged requests a line about which names it
    corrupted: int
    rate: float
    rate_low: float
    rate_high: float


@dataclass
class Pairs:
    pairs: list[Pair]
    nic_pairs: list[NicPair]
    components: list[Component] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"pairs": [asdict(p) for p in self.pairs],
                "nic_pairs": [asdict(p) for p in self.nic_pairs],
                "components": [asdict(c) for c in self.components]}  # fmt: skip

    def known(self) -> list[Pair]:
        """The pairs whose prefill and decode hosts are both known."""
        return [p for p in self.pairs if UNKNOWN not in (p.prefill_host, p.decode_host)]

    def sentences(self) -> list[str]:
        """The pair with the highest lower bound, where there are pairs to rank, and the
        rate of the rest beside it (no test: `suspects` weighs the pair as a factor)."""
        known = self.known()
        if len(known) < 2:
            return []
        top = self.pairs[0]
        rest_n = sum(p.requests for p in self.pairs[1:])
        rest_k = sum(p.corrupted for p in self.pairs[1:])
        rest = f"{100 * rest_k / rest_n:.1f} % on the other pairs" if rest_n else "no other pair"
        return [f"pairs: {top.prefill_host} → {top.decode_host} ranks first by the lower "
                f"bound of its corruption rate: {top.corrupted}/{top.requests} corrupted "
                f"({100 * top.rate:.1f} %, Wilson 95 % interval {100 * top.rate_low:.1f}–"
                f"{100 * top.rate_high:.1f} %), against {rest}"]  # fmt: skip


def pairs(db: Db = None, run: Runs = None) -> Pairs:
    with scoped(db, run) as s:
        return s.memo(("pairs", tuple(s.runs)), lambda: _pairs(s))


def _pairs(s: Scope) -> Pairs:
    where, params = s.where()
    bad = ", ".join(f"'{v}'" for v in BAD_VERDICTS)
    rows = s.con.execute(
        f"""SELECT coalesce(prefill_host, '{UNKNOWN}'), coalesce(decode_host, '{UNKNOWN}'),
                   count(*), count(*) FILTER (corrupted),
                   count(*) FILTER (coalesce(own_transfer_failed, false)),
                   count(*) FILTER (verdict IN ({bad}))
            FROM request_features WHERE {where} AND NOT {UNJUDGED_SQL}
            GROUP BY ALL""",
        params,
    ).fetchall()
    out = []
    for pre, dec, n, k, failed, mismatched in rows:
        lo, hi = wilson(k, n)
        out.append(Pair(pre, dec, n, k, failed, mismatched, k / n, lo or 0.0, hi or 0.0))
    nics = s.con.execute(
        f"""SELECT nic_pair, count(*), count(*) FILTER (corrupted) FROM request_features
            WHERE {where} AND NOT {UNJUDGED_SQL} AND nic_pair IS NOT NULL
              AND nic_pair <> '{NO_NIC_PAIR}'
            GROUP BY ALL""",
        params,
    ).fetchall()
    nic_out = []
    for name, n, k in nics:
        lo, hi = wilson(k, n)
        nic_out.append(NicPair(name, n, k, k / n, lo or 0.0, hi or 0.0))
    return Pairs(_ranked(out), _ranked(nic_out), _ranked(_components(s)))


def _components(s: Scope) -> list[Component]:
    """Each agent or engine the lines about the judged requests name, with those requests."""
    from .suspects import named_predicates
    from .suspects.features import load_table
    from .suspects.named_levels import PREFIX

    table = load_table(s.con, s.runs, {}, ())
    if not len(table):
        return []
    out = []
    for p in named_predicates(s, table)[0]:
        name = p.feature.removeprefix(PREFIX)
        if name in COMPONENT_NAMES:
            n, k = int(p.exposed.sum()), int((p.exposed & table.corrupted).sum())
            lo, hi = wilson(k, n)
            out.append(Component(name, str(p.level), n, k, k / n, lo or 0.0, hi or 0.0))
    return out


def _ranked(rows: list) -> list:
    """By the lower bound, then the requests (more evidence first), then the name."""
    return sorted(rows, key=lambda p: (-p.rate_low, -p.requests, str(asdict(p))))
