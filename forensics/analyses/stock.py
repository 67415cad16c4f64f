"""What stock SGLang's own lines tell, for a report without probe records: transfer
failures by decode host and KVPoll state, aborts, retractions, tracebacks and CUDA/NCCL
errors, decode load, and which of SGLang's evidence is missing with the flag that
gives it. Nothing here says a transfer matched: only checksums can."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import duckdb

from ..plural import counted
from ..scope import Db, Runs, scoped
from ..timefmt import iso_us

# What each stock table needs on the servers, said when it is empty.
FLAGS = {
    "req_stats": "no ReqTimeStats lines: start both services with "
    "--enable-request-time-stats-logging",
    "request_meta": "no Finish lines with meta_info: start both services with --log-requests "
    "(--log-requests-level 1 or more keeps num_retractions and cached_tokens)",
    "rid_rooms": "no Receive/Finish lines linking rids to rooms: --log-requests",
    "batches": "no batch lines: SGLang's INFO log level (decode samples every "
    "--decode-log-interval iterations; lower it to see load closer to each request)",
    "graph_capture": "no captured CUDA-graph batch sizes: keep the servers' start-up lines",
    "abort": "aborted requests are logged at DEBUG only: --log-level debug on decode shows them",
}
ERRORS = ("traceback", "cuda_error", "nccl_error")


ERROR_WORDS = ("traceback or CUDA/NCCL error", "tracebacks and CUDA/NCCL errors")


@dataclass
class HostEvents:
    host: str | None
    counts: dict[str, int]  # events.kind -> rows
    transfer_failures: int
    kvpoll: dict[str, int]  # KVPoll state a transfer failure named -> failures


@dataclass
class StockEvidence:
    hosts: list[HostEvents]
    retracted: int | None  # requests whose meta_info says they were retracted (None: unknown)
    errors: list[tuple[int | None, str | None, str, str]]  # ts_us, host, kind, detail (first few)
    error_count: int
    # minute start (µs), decode host, KVPoll state (None: not named), failures
    failures_by_minute: list[tuple[int, str | None, str | None, int]]
    peak_running: dict[str, int]  # decode host -> max #running-req logged
    missing: list[str] = field(default_factory=list)  # what is not there, and the flag for it

    def as_dict(self) -> dict:
        return asdict(self)

    def _over_time(self) -> str:
        """When the transfer failures came: the span, and the busiest minute by state."""
        minutes: dict[int, dict[str, int]] = {}
        for m, host, state, n in self.failures_by_minute:
            key = f"{host or '?'} " + (f"KVPoll.{state}" if state else "(no KVPoll state named)")
            minutes.setdefault(m, {})[key] = minutes.setdefault(m, {}).get(key, 0) + n
        first, last = min(minutes), max(minutes)
        busiest = max(minutes, key=lambda m: (sum(minutes[m].values()), -m))
        parts = ", ".join(f"{k} {n}" for k, n in sorted(minutes[busiest].items()))
        span = counted(len(minutes), "minute")
        return (f"transfer failures over time: {span} with failures between {iso_us(first)}"
                f" and {iso_us(last + 60_000_000)}; the most in the minute from "
                f"{iso_us(busiest)}: {sum(minutes[busiest].values())} ({parts})")  # fmt: skip

    def sentences(self) -> list[str]:
        out = []
        fails = sum(h.transfer_failures for h in self.hosts)
        if fails:
            per = "; ".join(
                f"{h.host or '?'} {h.transfer_failures:,}"
                + (f" ({', '.join(f'{n:,} in KVPoll.{s}' for s, n in h.kvpoll.items())})"
                   if h.kvpoll else "")
                for h in self.hosts if h.transfer_failures
            )  # fmt: skip
            out.append(f"SGLang logged {counted(fails, 'KV transfer failure')}: {per}")
            if self.failures_by_minute:
                out.append(self._over_time())
        kinds: dict[str, int] = {}
        for h in self.hosts:
            for k, n in h.counts.items():
                kinds[k] = kinds.get(k, 0) + n
        aborts = sum(kinds.get(k, 0) for k in ("abort", "oom_abort", "too_long", "abort_ack"))
        if aborts:
            out.append(f"{counted(aborts, 'abort')} logged by SGLang")
        if kinds.get("retract"):
            # a line per TP rank and retraction: its #retracted_reqs summed would count
            # each request once a rank; meta_info's num_retractions counts requests
            who = "" if self.retracted is None else (
                f"; {counted(self.retracted, 'request')} retracted, per meta_info")  # fmt: skip
            out.append(f"{counted(kinds['retract'], 'retraction')} (the KV pool ran full){who}")
        if kinds.get("lost_connection"):
            lost = counted(kinds["lost_connection"], "time")
            out.append(f"decode lost a prefill instance {lost}")
        layer = sum(kinds.get(k, 0) for k in ("session_failed", "aux_mismatch",
                                              "index_mismatch", "slice_failed"))  # fmt: skip
        if layer:
            out.append(f"{counted(layer, 'transfer-layer error')} (sessions, AUX_DATA, KV indices, "
                       "slices)")  # fmt: skip
        if self.error_count:
            ts, host, kind, detail = self.errors[0]
            when = f"at {iso_us(ts)}" if ts is not None else "(no time)"
            out.append(
                f"{counted(self.error_count, *ERROR_WORDS)}; the first: {kind} on "
                f"{host or '?'} {when}: {detail}"
            )
        if self.peak_running:
            peak = ", ".join(f"{h} {n}" for h, n in sorted(self.peak_running.items()))
            out.append(f"decode load (Decode batch samples), most #running-req: {peak}")
        out += [f"coverage: {m}" for m in self.missing]
        return out


def stock(db: Db = None, run: Runs = None) -> StockEvidence:
    with scoped(db, run) as s:
        con = s.con
        where, params = s.where()
        counts: dict[str | None, dict[str, int]] = {}
        for host, kind, n in con.execute(
            f"SELECT host, kind, count(*) FROM events WHERE {where} GROUP BY ALL ORDER BY ALL",
            params,
        ).fetchall():
            counts.setdefault(host, {})[kind] = n
        fails, kvpoll = _failures(con, where, params)
        hosts = sorted(set(counts) | set(fails), key=lambda h: h or "")
        errors, n_errors = _errors(con, where, params)
        retracted, known = con.execute(
            f"""SELECT count(DISTINCT rid) FILTER (WHERE num_retractions > 0),
                       count(num_retractions) FROM request_meta WHERE {where}""",
            params,
        ).fetchall()[0]
        by_minute = con.execute(
            f"""SELECT ts_us // 60000000 * 60000000 AS m, host,
                       nullif(regexp_extract(reason, 'KVPoll\\.(\\w+)', 1), ''), count(*)
                FROM transfers WHERE {where} AND ts_us IS NOT NULL GROUP BY ALL
                ORDER BY m, host NULLS FIRST, 3 NULLS FIRST""",
            params,
        ).fetchall()
        peak = dict(con.execute(
            f"""SELECT host, max(running_req) FROM batches
                WHERE {where} AND phase = 'Decode' AND host IS NOT NULL GROUP BY ALL""",
            params).fetchall())  # fmt: skip
        return StockEvidence(
            [HostEvents(h, counts.get(h, {}), fails.get(h, 0), kvpoll.get(h, {})) for h in hosts],
            int(retracted) if known else None, errors, n_errors, by_minute, peak,
            _missing(con, where, params),
        )  # fmt: skip


def _failures(con, where: str, params: list) -> tuple[dict, dict]:
    """Transfer failures per host, and per host the KVPoll states they name."""
    fails: dict[str | None, int] = {}
    kvpoll: dict[str | None, dict[str, int]] = {}
    for host, state, n in con.execute(
        f"""SELECT host, nullif(regexp_extract(reason, 'KVPoll\\.(\\w+)', 1), ''), count(*)
            FROM transfers WHERE {where} AND pattern IN ('transfer_failed',
                 'bootstrap_failed', 'handshake_failed')
            GROUP BY ALL ORDER BY ALL""",
        params,
    ).fetchall():
        fails[host] = fails.get(host, 0) + n
        if state:
            kvpoll.setdefault(host, {})[state] = n
    return fails, kvpoll


def _errors(con, where: str, params: list) -> tuple[list, int]:
    """The first tracebacks and CUDA/NCCL errors, and how many entries hold one (an entry
    can be both a traceback and the CUDA error it ends in)."""
    first = con.execute(
        f"""SELECT ts_us, host, kind, coalesce(detail, '') FROM events
            WHERE {where} AND kind IN {ERRORS} ORDER BY ts_us NULLS LAST LIMIT 5""",
        params,
    ).fetchall()
    n = con.execute(
        f"""SELECT count(DISTINCT (source_id, entry_no)) FROM events
            WHERE {where} AND kind IN {ERRORS}""",
        params,
    ).fetchall()[0][0]
    return first, n


def _missing(con: duckdb.DuckDBPyConnection, where: str, params: list) -> list[str]:
    """The stock evidence this database lacks, each with the flag that gives it."""

    def count(sql: str, args: list) -> int:
        return con.execute(sql, args).fetchall()[0][0]

    have = {
        t: count(f"SELECT count(*) FROM {t} WHERE {where}", params)
        for t in ("req_stats", "request_meta", "rid_rooms", "batches")
    }
    for kind in ("graph_capture", "abort"):
        have[kind] = count(
            f"SELECT count(*) FROM events WHERE {where} AND kind = ?", [*params, kind]
        )
    return [FLAGS[k] for k, n in have.items() if not n]
