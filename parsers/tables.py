"""The tables SGLang's own lines fill, each declared once: name, what a row is, columns
with their types and docs.

Everything else derives from these declarations: the DDL (forensics/store/database.py),
the columns a pattern may fill (parsers/patterns), the casts from the patterns' text
(`cast`), and the tables page of the docs (`markdown`). A new column is one `C(...)` line
here (and a migration where databases exist).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # polars loads with the readers that cast, not with every command
    import polars as pl


@dataclass(frozen=True)
class C:
    """One column: its name, DuckDB type, and what it holds (with units)."""

    name: str
    type: str
    doc: str
    not_null: bool = False


# Where each row came from: the same leading columns in every pattern table.
PROVENANCE = (
    C("run", "VARCHAR", "the run the source was ingested under", not_null=True),
    C("host", "VARCHAR", "the journal entry's host"),
    C("ts_us", "BIGINT", "the journal entry's time, µs since the epoch (the host's clock)"),
    C("source_id", "INTEGER", "the source (`sources.source_id`)", not_null=True),
    C("entry_no", "BIGINT", "the entry within the source (`entries.entry_no`)", not_null=True),
    C("pattern", "VARCHAR", "the pattern that read the line (parsers/patterns)", not_null=True),
)


@dataclass(frozen=True)
class Table:
    name: str
    kind: str  # what one row is called in ingest's counts ("12 batch records")
    doc: str  # what one row is
    columns: tuple[C, ...]  # the pattern's own columns, after PROVENANCE
    # Numbers printed with their units ("0.32ms", "0.14 GB/s"): read the number in front.
    # Off where values are bare numbers: a direct cast is 5x cheaper on batch lines.
    units: bool = False

    @property
    def fields(self) -> list[str]:
        """The columns a pattern fills (PROVENANCE is filled by ingest)."""
        return [c.name for c in self.columns]

    @property
    def all_columns(self) -> tuple[C, ...]:
        return (*PROVENANCE, *self.columns)

    def ddl(self) -> str:
        cols = ",\n    ".join(
            f"{c.name} {c.type}{' NOT NULL' if c.not_null else ''}" for c in self.all_columns
        )
        doc = "\n".join(f"-- {ln}" for ln in self.doc.splitlines())
        return f"{doc}\nCREATE TABLE {self.name} (\n    {cols}\n);"

    def cast(self, df: pl.DataFrame) -> pl.DataFrame:
        """A pattern's text fields as the declared types; a value that does not read as
        its type is NULL (the line is kept in `entries` as it was)."""
        exprs = [
            _cast(c, self.units)
            for c in self.columns
            if c.name in df.columns and c.type != "VARCHAR"
        ]
        return df.with_columns(exprs) if exprs else df


_NUMBER = r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


def _cast(c: C, units: bool) -> pl.Expr:
    import polars as pl

    col = pl.col(c.name).cast(pl.String)
    # With units the number in front is the value, in the unit the column's name gives.
    number = col.str.extract(_NUMBER, 1) if units else col
    if c.type == "DOUBLE":
        return number.cast(pl.Float64, strict=False).alias(c.name)
    if c.type in ("BIGINT", "INTEGER"):
        return number.cast(pl.Float64, strict=False).cast(pl.Int64, strict=False).alias(c.name)
    if c.type == "UBIGINT":
        return col.str.strip_chars().cast(pl.UInt64, strict=False).alias(c.name)
    if c.type == "BOOLEAN":
        return col.str.strip_chars().str.to_lowercase().eq("true").alias(c.name)
    raise ValueError(f"no cast for {c.type}")


TRANSFERS = Table(
    "transfers",
    "transfer",
    "SGLang's own transfer events (built-in patterns, parsers/patterns/sglang.toml):\n"
    "failures, timeouts, context corruption, native checksum aborts.",
    (
        C("side", "VARCHAR", "Prefill or Decode, where the line says"),
        C("rank", "BIGINT", "the rank the line names"),
        C("rid", "VARCHAR", "request id"),
        C("room", "UBIGINT", "bootstrap_room"),
        C("other_room", "UBIGINT", "the room whose metadata arrived instead (context corruption)"),
        C("exception", "VARCHAR", "the exception class (KVTransferError, …)"),
        C("reason", "VARCHAR", "the rest of the message (a KVPoll state among it)"),
    ),
)

BATCHES = Table(
    "batches",
    "batch",
    'SGLang scheduler batch statistics ("Prefill batch" / "Decode batch" lines, every\n'
    'spelling); ranks is the log prefix\'s "DP0 TP0 EP0" part. Decode lines are samples:\n'
    "one every --decode-log-interval iterations (default 40).",
    (
        C("phase", "VARCHAR", "Prefill or Decode", not_null=True),
        C("ranks", "VARCHAR", "the prefix's ranks, e.g. DP0 TP0 EP0"),
        C("forward_ct", "BIGINT", "the forward counter in brackets, where printed"),
        C("new_seq", "BIGINT", "#new-seq"),
        C("new_token", "BIGINT", "#new-token"),
        C("cached_token", "BIGINT", "#cached-token"),
        C("token", "BIGINT", "#token"),
        C("full_token", "BIGINT", "#full token"),
        C("swa_token", "BIGINT", "#swa token"),
        C("token_usage", "DOUBLE", "token usage (share of the KV pool)"),
        C("full_token_usage", "DOUBLE", "full token usage"),
        C("swa_token_usage", "DOUBLE", "swa token usage"),
        C("mamba_usage", "DOUBLE", "mamba usage"),
        C("pre_allocated_usage", "DOUBLE", "pre-allocated usage"),
        C("running_req", "BIGINT", "#running-req"),
        C("queue_req", "BIGINT", "#queue-req"),
        C("prealloc_req", "BIGINT", "#prealloc-req (#bootstrap-req on prefill)"),
        C("inflight_req", "BIGINT", "#inflight-req"),
        C("transfer_req", "BIGINT", "#transfer-req"),
        C("retracted_req", "BIGINT", "#retracted-req"),
        C("pending_token", "BIGINT", "#pending-token"),
        C("accept_len", "DOUBLE", "speculative accept length"),
        C("accept_rate", "DOUBLE", "speculative accept rate"),
        C("cuda_graph", "BOOLEAN", "cuda graph: the step ran a captured graph"),
        C("npu_graph", "BOOLEAN", "npu graph"),
        C("input_throughput", "DOUBLE", "input throughput, token/s"),
        C("gen_throughput", "DOUBLE", "gen throughput, token/s"),
        C("extra", "VARCHAR", "keys this table lacks, JSON object of text"),
    ),
)

RID_ROOMS = Table(
    "rid_rooms",
    "rid_room",
    "SGLang's --log-requests lines: which room each rid was given (Receive / Finish).",
    (
        C("event", "VARCHAR", "Receive or Finish", not_null=True),
        C("rid", "VARCHAR", "request id"),
        C("room", "UBIGINT", "bootstrap_room", not_null=True),
    ),
)

HTTP = Table(
    "http",
    "http",
    "uvicorn access lines of the HTTP servers.",
    (
        C("client", "VARCHAR", "client address:port"),
        C("method", "VARCHAR", "HTTP method", not_null=True),
        C("path", "VARCHAR", "request path"),
        C("status", "BIGINT", "HTTP status"),
    ),
)

REQ_STATS = Table(
    "req_stats",
    "req_stat",
    "SGLang's per-request time stats (--enable-request-time-stats-logging): one row per\n"
    "ReqTimeStats / Req Time Stats line, one per request and side (prefill, decode,\n"
    "unified). Durations in ms as SGLang printed them; which ones a line holds depends on\n"
    "the side and the version.",
    (
        C("rid", "VARCHAR", "request id"),
        C("room", "UBIGINT", "bootstrap_room (PD only)"),
        C("type", "VARCHAR", "prefill, decode or unified (lower case)"),
        C("input_len", "BIGINT", "prompt tokens"),
        C("cached_input_len", "BIGINT", "prompt tokens served from the prefix cache"),
        C("output_len", "BIGINT", "tokens generated"),
        C("attempts", "BIGINT", "attempts (newer versions)"),
        C("retries", "BIGINT", "#retries of prefill's transfer (some versions)"),
        C("bootstrap_queue_ms", "DOUBLE", "prefill: bootstrap queue, ms"),
        C("prealloc_queue_ms", "DOUBLE", "decode: pre-allocation queue, ms"),
        C("bootstrap_ms", "DOUBLE", "bootstrap handshake, ms"),
        C("alloc_wait_ms", "DOUBLE", "waiting for KV memory, ms"),
        C("transfer_ms", "DOUBLE", "decode: waiting for the KV transfer, ms"),
        C("queue_ms", "DOUBLE", "waiting queue, ms"),
        C("forward_ms", "DOUBLE", "forward until completion, ms"),
        C(
            "entry_time",
            "DOUBLE",
            "entry/start time as printed, s (wall clock where the line "
            "says entry_time; older start= values are the process's perf_counter)",
        ),
        C("transfer_speed_gb_s", "DOUBLE", "prefill: KV transfer speed, GB/s"),
        C("transfer_total_mb", "DOUBLE", "prefill: KV bytes sent, MB"),
        C("extra", "VARCHAR", "keys this table lacks, JSON object of text"),
    ),
    units=True,
)

REQUEST_META = Table(
    "request_meta",
    "request_meta",
    "What SGLang said of a finished request: the meta_info of --log-requests Finish lines\n"
    "(text or JSON form) and of --export-metrics-to-file records. Only the meta_info span\n"
    "is read, as a literal, never evaluated.",
    (
        C("rid", "VARCHAR", "request id (meta_info id, else the request's rid)"),
        C("room", "UBIGINT", "bootstrap_room of the request, where the line holds it"),
        C("finish_type", "VARCHAR", "finish_reason.type: stop, length, abort"),
        C("finish_message", "VARCHAR", "finish_reason.message (an abort's reason)"),
        C("status_code", "BIGINT", "finish_reason.status_code (an abort's HTTP status)"),
        C("prompt_tokens", "BIGINT", "prompt tokens"),
        C("completion_tokens", "BIGINT", "completion tokens"),
        C("cached_tokens", "BIGINT", "prompt tokens served from the prefix cache"),
        C("num_retractions", "BIGINT", "times the request was retracted and resumed"),
        C("e2e_latency", "DOUBLE", "end-to-end latency, s"),
        C("dp_rank", "BIGINT", "the data-parallel rank that served it"),
        C("extra", "VARCHAR", "the rest of meta_info, JSON"),
    ),
)

SCHEDULER_STATUS = Table(
    "scheduler_status",
    "status",
    "A scheduler's requests at one moment (SGLANG_LOG_SCHEDULER_STATUS_TARGET with\n"
    "--enable-metrics): the rids running and queued, every SGLANG_LOG_SCHEDULER_STATUS_INTERVAL\n"
    "seconds (60 by default). A sample of who was co-resident, never one step's batch.",
    (
        C("rank", "BIGINT", "the scheduler's rank, where the line holds it"),
        C("running_rids", "VARCHAR", "rids in the running batch, a JSON list"),
        C("queued_rids", "VARCHAR", "rids in the waiting queue, a JSON list"),
    ),
)

EVENTS = Table(
    "events",
    "event",
    "Things that happened on a server, one row each: aborts, retractions, transfer-layer\n"
    "errors, tracebacks and CUDA/NCCL errors, the router's request outcomes and retries,\n"
    "captured CUDA-graph batch sizes. `kind` says which (docs/tables.md lists them).",
    (
        C("kind", "VARCHAR", "what happened (abort, retract, lost_connection, …)", not_null=True),
        C("rid", "VARCHAR", "the request it names, if any"),
        C("room", "UBIGINT", "the bootstrap_room it names, if any"),
        C("count", "BIGINT", "how many it affected (retracted requests, affected transfers)"),
        C("value", "DOUBLE", "a measure: new_token_ratio after a retraction, latency in s"),
        C("peer", "VARCHAR", "the other side: bootstrap address, URL, NIC"),
        C("status", "BIGINT", "an HTTP status the line gives"),
        C("detail", "VARCHAR", "the rest: the error text, the captured batch sizes, …"),
    ),
)

PATTERN_TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        TRANSFERS,
        BATCHES,
        RID_ROOMS,
        HTTP,
        REQ_STATS,
        REQUEST_META,
        EVENTS,
        SCHEDULER_STATUS,
    )
}

# The vocabulary of events.kind, with what each means (the docs' tables page lists it).
EVENT_KINDS = {
    "abort": "SGLang aborted a request (queued, running, in a disaggregation queue, …)",
    "oom_abort": "retract_decode aborted the last request: out of memory",
    "too_long": "a request exceeded the maximum number of tokens",
    "abort_ack": "Mooncake: prefill acknowledged decode's abort of a room",
    "retract": "KV cache pool full: running requests retracted (count)",
    "lost_connection": "decode lost a prefill instance (count: transfers affected)",
    "room_failed": "decode failed a room because its prefill went down",
    "session_failed": "a transfer session failed",
    "aux_mismatch": "AUX_DATA length mismatch for a room",
    "index_mismatch": "KV index lengths differ between prefill and decode",
    "slice_failed": "Mooncake: an RDMA slice failed (peer: NICs)",
    "traceback": "a Python traceback",
    "cuda_error": "a CUDA error (illegal memory access, …)",
    "nccl_error": "an NCCL error",
    "graph_capture": "CUDA graphs captured at start-up (detail: the batch sizes)",
    "router_request": "the router finished a request (status, value: latency s)",
    "router_error": "the router got an error from a server",
    "router_retry": "the router retried a request on another pair",
}


def markdown() -> str:
    """The tables page of the docs (docs/tables.md is this, checked by a test)."""
    out = [
        "# Tables SGLang's own lines fill",
        "",
        "Generated from `parsers/tables.py` (`python -m forensics.parsers.tables`): "
        "edit the declarations, not this page.",
        "Every table starts with the same columns, where the row came from:",
        "",
        "| column | type | what it holds |",
        "|---|---|---|",
        *(f"| `{c.name}` | {c.type} | {c.doc} |" for c in PROVENANCE),
    ]
    for t in PATTERN_TABLES.values():
        out += ["", f"## `{t.name}`", "", t.doc.replace("\n", " "), ""]
        out += ["| column | type | what it holds |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in t.columns]
    out += ["", "## `events.kind`", "", "| kind | meaning |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in EVENT_KINDS.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
