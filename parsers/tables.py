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
    import pyarrow as pa


def _pa():
    import pyarrow as pa

    return pa


MAP = "MAP(VARCHAR, VARCHAR)"


def map_entries() -> pl.DataType:
    """polars' form of a MAP (a list of {key, value}), as the shards store it."""
    import polars as pl

    return pl.List(pl.Struct({"key": pl.String, "value": pl.String}))


# DuckDB type -> Arrow type, for the schemas readers fill
_ARROW = {
    "VARCHAR": lambda: _pa().string(), "BIGINT": lambda: _pa().int64(),
    "INTEGER": lambda: _pa().int32(), "UBIGINT": lambda: _pa().uint64(),
    "BOOLEAN": lambda: _pa().bool_(), "DOUBLE": lambda: _pa().float64(),
    "TINYINT": lambda: _pa().int8(), "SMALLINT": lambda: _pa().int16(),
    "BLOB": lambda: _pa().binary(), "BIGINT[]": lambda: _pa().list_(_pa().int64()),
    "VARCHAR[]": lambda: _pa().list_(_pa().string()),
    # stored as Arrow's list of {key, value} (what polars writes); the view makes it a MAP
    MAP: lambda: _pa().list_(_pa().struct([("key", _pa().string()), ("value", _pa().string())])),
}  # fmt: skip


# A shard's source is the folder it lies in (`…/source_id=N/<file>`), read from the file's
# name and from that folder only: DuckDB's hive partitioning would read every `key=value`
# folder on the way (an incident under `host=decode-0/` gave every entry that host). A
# filter on it still prunes files before they are opened (DuckDB evaluates filters on
# `filename` against the file list).
SOURCE_OF_FILE = "CAST(regexp_extract(filename, '(^|/)source_id=([0-9]+)/[^/]*$', 2) AS INTEGER)"


def read_parquet(files: list, *options: str) -> str:
    """`read_parquet([...])` over these files (paths or strings) with hive partitioning
    off (DuckDB guesses it from the path otherwise), and any further `options`."""
    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    return f"read_parquet([{listed}], {', '.join(('hive_partitioning = false', *options))})"


@dataclass(frozen=True)
class C:
    """One column: its name, DuckDB type, and what it holds (with units)."""

    name: str
    type: str
    doc: str
    not_null: bool = False
    key: str = ""  # PRIMARY KEY | UNIQUE
    default: str = ""  # a SQL default
    compression: str = ""  # DuckDB's column compression (zstd for text that dominates)
    # What a user may have written (prompts, replies, harness details): `bundle
    # --redact-prompts` replaces it by its HMAC, keeping only the tokens of `vocabulary`,
    # the closed set of values the column's text may name (SGLang's KVPoll states)
    user_text: bool = False
    vocabulary: tuple[str, ...] = ()
    # A masked template (or a value it names): evidence, kept readable under
    # --redact-prompts unless it holds a piece of a known prompt or reply
    # (forensics/artifacts/user_text.py), which the masker can leave in free text
    masked: bool = False

    def ddl(self) -> str:
        out = f'"{self.name}" {self.type}'  # quoted: `full` is a keyword
        if self.compression:
            out += f" USING COMPRESSION {self.compression}"
        if self.not_null:
            out += " NOT NULL"
        if self.default:
            out += f" DEFAULT {self.default}"
        if self.key:
            out += f" {self.key}"
        return out


# SGLang's KVPoll states (disaggregation/base/conn.py): named in transfer failures' text
KVPOLL = tuple(
    f"KVPoll.{s}" for s in ("Failed", "Bootstrapping", "WaitingForInput", "Transferring", "Success")
)

# Where each row came from: the same leading columns in every pattern table.
PROVENANCE = (
    C("run", "VARCHAR", "the run the source was ingested under", not_null=True),
    C("host", "VARCHAR", "the journal entry's host"),
    C("ts_us", "BIGINT", "the journal entry's time, µs since the epoch (the host's clock)"),
    C("source_id", "INTEGER", "the source (`sources.source_id`)", not_null=True),
    C("entry_no", "BIGINT", "the entry within the source (`entries.entry_no`)", not_null=True),
    C("pattern", "VARCHAR", "the pattern that read the line (parsers/patterns)", not_null=True),
)
# the rank tag of SGLang's prefix (parsers/ranktags.py): on every row of a pattern table
# and of `lines`; NULL where the line's prefix does not state it
RANK_TAGS = tuple(
    C(name, "BIGINT", f"the {what} rank of the line's prefix ({name.upper()}N)")
    for name, what in (("dp", "data-parallel"), ("tp", "tensor-parallel"),
                       ("ep", "expert-parallel"), ("attn_cp", "attention context-parallel"),
                       ("pp", "pipeline-parallel"), ("moe_dp", "MoE data-parallel"))
)  # fmt: skip
PROVENANCE = PROVENANCE + RANK_TAGS


@dataclass(frozen=True)
class Table:
    name: str
    kind: str  # what one row is called in ingest's counts ("12 batch records")
    doc: str  # what one row is
    columns: tuple[C, ...]  # the pattern's own columns, after PROVENANCE
    # Numbers printed with their units ("0.32ms", "0.14 GB/s"): read the number in front.
    # Off where values are bare numbers: a direct cast is 5x cheaper on batch lines.
    units: bool = False
    provenance: tuple[C, ...] = PROVENANCE  # the leading columns ingest fills

    @property
    def fields(self) -> list[str]:
        """The columns a pattern fills (PROVENANCE is filled by ingest)."""
        return [c.name for c in self.columns]

    @property
    def all_columns(self) -> tuple[C, ...]:
        return (*self.provenance, *self.columns)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.all_columns]

    def arrow(self, skip: tuple[str, ...] = ()) -> pa.Schema:
        """The columns as an Arrow schema (those a reader fills: `skip` the rest)."""
        import pyarrow as pa

        return pa.schema([(c.name, _ARROW[c.type]()) for c in self.all_columns
                          if c.name not in skip])  # fmt: skip

    def ddl(self) -> str:
        cols = ",\n    ".join(c.ddl() for c in self.all_columns)
        doc = "\n".join(f"-- {ln}" for ln in self.doc.splitlines())
        return f"{doc}\nCREATE TABLE {self.name} (\n    {cols}\n);"

    def scan(self, files: list[str]) -> str:
        return read_parquet(files, "filename = true", "union_by_name = true")

    def view(self, files: list[str], present: set[str] | None = None) -> str:
        """The body of the view that reads this table from its shard files: the declared
        columns, in order and type, whatever a shard of an older schema lacks (NULL;
        `present`: the columns some file holds, where a declared one is in none — a
        column added after every shard was written). `source_id` is the name of each
        file's own folder, never a folder above it."""
        if not files:
            nulls = ", ".join(f'CAST(NULL AS {c.type}) AS "{c.name}"' for c in self.all_columns)
            return f"SELECT {nulls} WHERE false"
        cols = ", ".join(
            f'{SOURCE_OF_FILE} AS "source_id"' if c.name == "source_id"
            else f'CAST(NULL AS {c.type}) AS "{c.name}"' if present is not None
            and c.name not in present
            else f'map_from_entries("{c.name}") AS "{c.name}"' if c.type == MAP
            else f'CAST("{c.name}" AS {c.type}) AS "{c.name}"'
            for c in self.all_columns
        )  # fmt: skip
        return f"SELECT {cols} FROM {self.scan(files)}"

    def cast(self, df: pl.DataFrame) -> pl.DataFrame:
        """A pattern's text fields as the declared types; a value that does not read as
        its type is NULL (the line is kept in `entries` as it was)."""
        import polars as pl

        exprs = [
            _cast(c, self.units)
            for c in self.columns
            if c.name in df.columns and c.type not in ("VARCHAR", MAP)
        ]
        # a map read by a JSON path is a list of {key, value} already; as text (a path
        # matched line by line) it is decoded
        exprs += [
            pl.col(c.name).str.json_decode(map_entries())
            for c in self.columns
            if c.type == MAP and c.name in df.columns and df[c.name].dtype == pl.String
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
        C(
            "reason_code",
            "VARCHAR",
            "the transport's error code, where the line gives one (NIXL_ERR_REMOTE_DISCONNECT, …)",
        ),
        C(
            "peer",
            "VARCHAR",
            "the peer the reason names (remote mooncake session H:P is not alive)",
        ),
        C(
            "reason",
            "VARCHAR",
            "the rest of the message (a KVPoll state among it)",
            user_text=True,
            vocabulary=KVPOLL,
        ),
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
        C("extra", "VARCHAR", "keys this table lacks, JSON object of text", user_text=True),
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
        C("extra", "VARCHAR", "keys this table lacks, JSON object of text", user_text=True),
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
        C("finish_message", "VARCHAR", "finish_reason.message (an abort's reason)", user_text=True),
        C("status_code", "BIGINT", "finish_reason.status_code (an abort's HTTP status)"),
        C("prompt_tokens", "BIGINT", "prompt tokens"),
        C("completion_tokens", "BIGINT", "completion tokens"),
        C("cached_tokens", "BIGINT", "prompt tokens served from the prefix cache"),
        C("num_retractions", "BIGINT", "times the request was retracted and resumed"),
        C("e2e_latency", "DOUBLE", "end-to-end latency, s"),
        C("dp_rank", "BIGINT", "the data-parallel rank that served it"),
        C("extra", "VARCHAR", "the rest of meta_info, JSON", user_text=True),
    ),
)

REQUEST_TRACES = Table(
    "request_traces",
    "request_trace",
    "Dynamo's request trace (DYN_REQUEST_TRACE, schema dynamo.request.trace.v1): one row a\n"
    "record — request_end (what the frontend measured of a request), tool_start/tool_end/\n"
    "tool_error (a harness's tool events), request_payload (ids only: its payload is not\n"
    "stored here). Fields as lib/llm/src/request_trace/types.rs serializes them.",
    (
        C(
            "event_type",
            "VARCHAR",
            "request_end, tool_start, tool_end, tool_error, request_payload",
            not_null=True,
        ),
        C("event_source", "VARCHAR", "dynamo or harness"),
        C("rid", "VARCHAR", "Dynamo's request id (request.request_id)"),
        C("x_request_id", "VARCHAR", "the client's X-Request-Id (the reproducer sends its rid)"),
        C("model", "VARCHAR", "the model"),
        C("input_tokens", "BIGINT", "prompt tokens"),
        C("output_tokens", "BIGINT", "generated tokens"),
        C("cached_tokens", "BIGINT", "prompt tokens served from cache"),
        C("request_received_ms", "BIGINT", "when the frontend received it, ms since the epoch"),
        C("prefill_wait_time_ms", "DOUBLE", "the router's wait for a prefill worker, ms"),
        C("prefill_time_ms", "DOUBLE", "prefill, ms"),
        C("ttft_ms", "DOUBLE", "time to first token, ms"),
        C("total_time_ms", "DOUBLE", "the whole request, ms"),
        C("avg_itl_ms", "DOUBLE", "mean inter-token latency, ms"),
        C("kv_hit_rate", "DOUBLE", "share of the prompt's KV blocks found cached (0–1)"),
        C(
            "kv_transfer_estimated_latency_ms",
            "DOUBLE",
            "the router's estimate of the KV transfer, ms",
        ),
        C("queue_depth", "BIGINT", "requests queued when it was routed"),
        C("prefill_worker_id", "UBIGINT", "the prefill worker"),
        C("prefill_dp_rank", "BIGINT", "its DP rank"),
        C("decode_worker_id", "UBIGINT", "the decode worker"),
        C("decode_dp_rank", "BIGINT", "its DP rank"),
        C("finish_reason", "VARCHAR", "the final finish reason (stop, length, tool_calls, …)"),
        C("session_id", "VARCHAR", "the agent session (agent_context.session_id)"),
        C("tool_call_id", "VARCHAR", "a tool event's call id"),
        C("tool_class", "VARCHAR", "a tool event's class"),
        C("tool_status", "VARCHAR", "running, succeeded, error, cancelled"),
        C("tool_duration_ms", "DOUBLE", "the tool call's duration, ms"),
        C(
            "extra",
            MAP,
            "every other field of the record, under its dotted path "
            "(`request.replay.input_length`), its value as text (a list as JSON)",
            user_text=True,
        ),
    ),
)

SPANS = Table(
    "spans",
    "span",
    "An OpenTelemetry span (OTLP JSON or protobuf, as a collector's file exporter writes\n"
    "them): SGLang's request and thread spans, Dynamo's, llm-d's. Its row's host is its\n"
    "resource's host.name, else k8s.pod.name, else service.instance.id (a --host-alias\n"
    "applied); its ts_us its start on that host's clock. rid, room and x_request_id come from\n"
    "the attributes the stacks set (parsers/otlp.py cites them).",
    (
        C("trace_id", "VARCHAR", "the trace (32 hex digits)", not_null=True),
        C("span_id", "VARCHAR", "the span (16 hex digits)", not_null=True),
        C("parent_span_id", "VARCHAR", "its parent (NULL: a root span)"),
        C("name", "VARCHAR", "the span's name (SGLang: `decode Req 3feed151`, a slice's name)"),
        C("service", "VARCHAR", "the resource's service.name"),
        C("scope", "VARCHAR", "the instrumentation scope's name"),
        C("kind", "VARCHAR", "INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER, UNSPECIFIED"),
        C("start_us", "BIGINT", "its start, µs since the epoch (its host's clock)"),
        C("end_us", "BIGINT", "its end, µs since the epoch"),
        C("status", "VARCHAR", "UNSET, OK or ERROR"),
        C("status_message", "VARCHAR", "the status's message", user_text=True),
        C("rid", "VARCHAR", "the request: attribute rid (SGLang), else request_id (Dynamo)"),
        C("room", "UBIGINT", "attribute bootstrap_room (SGLang writes it in hex)"),
        C("x_request_id", "VARCHAR", "attribute x_request_id (Dynamo), else the captured "
          "X-Request-Id header (http.request.header.x-request-id)"),
        C("attributes", MAP, "every attribute, its value as text (lists and maps as JSON)",
          user_text=True),
    ),
)  # fmt: skip

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
        C("raised_by", "VARCHAR", "who raised a traceback (Scheduler, DetokenizerManager, …)"),
        C(
            "detail",
            "VARCHAR",
            "the rest: the error text, the captured batch sizes, …",
            user_text=True,
        ),
    ),
)

# The store's own tables: the catalog, journal entries, the probes' records, the
# harness's results and the quarantine. Their leading columns are their own.
META = Table("meta", "meta", "Facts about the file: schema_version, stored views' stamps.", (
    C("key", "VARCHAR", "the fact's name", key="PRIMARY KEY"),
    C("value", "VARCHAR", "its value"),
), provenance=())  # fmt: skip
RUNS = Table("runs", "run", "A label given with --run, with its tags.", (
    C("run", "VARCHAR", "the run's name", key="PRIMARY KEY"),
    C("tags", "MAP(VARCHAR, VARCHAR)", "its tags (--tag KEY=VALUE; `server.*` from repro)"),
    C("created", "TIMESTAMPTZ", "when it was first ingested", default="current_timestamp"),
), provenance=())  # fmt: skip
SOURCES = Table("sources", "source", "One ingested input.", (
    C("source_id", "INTEGER", "the source's id", key="PRIMARY KEY"),
    C("run", "VARCHAR", "the run it was ingested under", not_null=True),
    C("path", "VARCHAR", "where it was read from", not_null=True),
    C("sha256", "VARCHAR", "its content's hash (the same file twice is skipped)", not_null=True,
      key="UNIQUE"),
    C("bytes", "BIGINT", "its size as read (decompressed)"),
    C("format", "VARCHAR", "the rendering or form read (sniffed or --format)"),
    C("compression", "VARCHAR", "gzip, zstd, xz or NULL"),
    C("lines", "BIGINT", "input lines"),
    C("entries", "BIGINT", "entries stored"),
    C("duplicates", "BIGINT", "entries dropped: already stored from another source"),
    C("rejoined", "BIGINT", "entries joined back from journald's LineMax pieces"),
    C("quarantined", "BIGINT", "lines or records quarantined"),
    C("markers", "BIGINT", "journalctl's `-- Boot … --` and blank marker lines"),
    C("notes", "VARCHAR[]", "what the reader noted (years guessed, CRLF, …)"),
    C("ingested_at", "TIMESTAMPTZ", "when", default="current_timestamp"),
), provenance=())  # fmt: skip
ENTRIES = Table("entries", "entry", """One journal entry (or one line of a plain log).
Messages are most of the bytes: zstd stores them 2.5x smaller and twice as fast as the
default string compression (measured on the benchmark journal).""", (
    C("source_id", "INTEGER", "the source", not_null=True),
    C("entry_no", "BIGINT", "its order in the source, from 0", not_null=True),
    C("ts_us", "BIGINT", "realtime, µs since the epoch, UTC (NULL: no time, neither its own "
      "nor one before it in the source)"),
    C("ts_inherited", "BOOLEAN", "true: the entry stated no time and took the time of the "
      "entry before it in the same source (a traceback's lines in `-o cat`)"),
    C("mono_us", "BIGINT", "monotonic µs (meaningful with boot_id)"),
    C("boot_id", "VARCHAR", "journald's _BOOT_ID"),
    C("host", "VARCHAR", "the host"),
    C("unit", "VARCHAR", "the systemd unit"),
    C("ident", "VARCHAR", "SYSLOG_IDENTIFIER (or _COMM)"),
    C("pid", "BIGINT", "the process id"),
    C("priority", "TINYINT", "syslog priority 0–7"),
    C("message", "VARCHAR", "the message (invalid UTF-8 as U+FFFD)", compression="zstd",
      user_text=True),
    C("message_raw", "BLOB", "the exact bytes, when the message is not UTF-8"),
    C("cursor", "VARCHAR", "journald's cursor"),
    C("line_first", "BIGINT", "its first line in the input, from 1"),
    C("line_last", "BIGINT", "its last line"),
    C("truncated", "BOOLEAN", "journalctl replaced the value (json null, `[… blob data]`)"),
    C("invalid_utf8", "BOOLEAN", "the message was not UTF-8"),
    C("line_break", "VARCHAR", "journald's _LINE_BREAK: why it split a stdout line"),
    C("fields", "VARCHAR", "every other field, a JSON object", compression="zstd",
      user_text=True),
    C("parts", "SMALLINT", "pieces joined into it (> 1: rejoined)", not_null=True, default="1"),
    C("key", "UBIGINT", "hash of its second, host and message: which sources dedupe compares",
      not_null=True),
), provenance=())  # fmt: skip
RECORD = PROVENANCE[:5]  # the probes' records keep where they came from, without a pattern
CHECKSUMS = Table("checksums", "checksum", """One `forensics:checksum` record
(docs/log-contract.md): the digest of one buffer one side of a transfer saw.""", (
    C("side", "VARCHAR", "src (prefill sent) or dst (decode received)", not_null=True),
    C("room", "UBIGINT", "bootstrap_room", not_null=True),
    C("rid", "VARCHAR", "request id"),
    C("buf", "VARCHAR", "which buffer (kv, index_k, …)", not_null=True),
    C("layer", "VARCHAR", "layer (or a range, or all)"),
    C("tp", "BIGINT", "tensor-parallel rank"),
    C("dtype", "VARCHAR", "element type"),
    C("nbytes", "BIGINT", "bytes digested"),
    C("head", "VARCHAR", "digest of the first bytes (hex)"),
    C("tail", "VARCHAR", "digest of the last bytes (hex)"),
    C("full", "VARCHAR", "digest of every byte (hex)"),
    C("alg", "BIGINT", "the digest's algorithm (forensics.probes.digest.ALG); NULL where the "
      "record names none: algorithm 1, the probes before algorithm 2"),
    C("extra", "VARCHAR", "other keys (JSON)", user_text=True),
), provenance=RECORD)  # fmt: skip
CANARY = Table("canary", "canary", """One `forensics:canary` record: the KV pages around one
decode step, one layer.""", (
    C("step", "BIGINT", "decode step", not_null=True),
    C("layer", "BIGINT", "layer", not_null=True),
    C("bs", "BIGINT", "batch size"),
    C("mode", "VARCHAR", "how the step ran (graph, eager, …)"),
    C("expected", "BIGINT[]", "pages the step should write (when listed)"),
    C("changed", "BIGINT[]", "pages it changed"),
    C("unexpected", "BIGINT[]", "changed but not expected"),
    C("n_expected", "BIGINT", "count of expected"),
    C("n_changed", "BIGINT", "count of changed"),
    C("n_unexpected", "BIGINT", "count of unexpected"),
    C("extra", "VARCHAR", "other keys (JSON)", user_text=True),
), provenance=RECORD)  # fmt: skip
STEPS = Table("steps", "step", "One `forensics:step` record: who was in a decode step's batch.", (
    C("step", "BIGINT", "decode step", not_null=True),
    C("bs", "BIGINT", "batch size"),
    C("rids", "VARCHAR", "the batch's request ids, comma-separated ('' when it logged none)"),
    C("rooms", "VARCHAR", "the batch's rooms, comma-separated"),
    C("extra", "VARCHAR", "other keys (JSON)", user_text=True),
), provenance=RECORD)  # fmt: skip
LINES = Table("lines", "line", """Every entry's template (parsers/templates.py): its message
with the variable parts masked, the level the line states, the part of the stack it comes
from and the values it names. The `templates` view sums them up.""", (
    C("template", "UBIGINT", "the template's id: a hash of its text alone (the same line has "
      "the same id in any source, rendering, order or masker that masks it alike)",
      not_null=True),
    C("masker", "SMALLINT", "the masker's version that gave the text (parsers/templates.py: a "
      "masker change moves only the ids of the texts it changes)"),
    C("text", "VARCHAR", "the template: the message masked (<n>, <hex>, <ip>, <path>, …), or "
      "the name of the pattern that reads the line; NULL past a source's cap on texts",
      user_text=True, masked=True),
    C("pattern", "VARCHAR", "the pattern (or forensics: record kind) that reads the line"),
    C("level", "VARCHAR", "debug, info, warning, error or critical, as the line (or journald's "
      "PRIORITY, other than 6) states it; NULL: it states none (SGLang's default prefix)"),
    C("component", "VARCHAR", "sglang, router, mooncake, nixl, nccl, cuda, traceback, vllm, "
      "dynamo, … by the line's shape"),
    *RANK_TAGS,
    C("named", MAP, "the values a line no pattern reads names, under the names it states "
      "(parsers/namer.py; values as text, `line_values` has them long with numbers): at most "
      "16, a value at most 200 characters (a longer one ends in …); `(left out)`: how many "
      "past 16", user_text=True, masked=True),
), provenance=RECORD)  # fmt: skip
RESULTS = Table("results", "result", """The reproducer harness: one row per request it sent,
marked ok or corrupted.""", (
    C("run", "VARCHAR", "the file's run header, else --run", not_null=True),
    C("source_id", "INTEGER", "the results file", not_null=True),
    C("line", "BIGINT", "its line"),
    C("session", "VARCHAR", "harness session", not_null=True),
    C("round", "BIGINT", "round within the session"),
    C("rid", "VARCHAR", "request id", not_null=True),
    C("room", "UBIGINT", "bootstrap_room, when the harness knew it"),
    C("corrupted", "BOOLEAN", "the harness judged the reply corrupted", not_null=True),
    C("reason", "VARCHAR", "why", user_text=True),
    C("start_us", "BIGINT", "sent, µs since the epoch (the client's clock)"),
    C("end_us", "BIGINT", "answered, µs since the epoch"),
    C("concurrency", "BIGINT", "requests in flight when it was sent"),
    C("extra", "VARCHAR", "every other field (JSON)", user_text=True),
    C("status", "VARCHAR", "ok, corrupted, truncated, http_error, timeout, uncompared"),
), provenance=())  # fmt: skip
QUARANTINE = Table("quarantine", "quarantined", """An input line no reader could take, or a
record that breaks the contract, with why.""", (
    C("source_id", "INTEGER", "the source", not_null=True),
    C("line", "BIGINT", "its line in the input"),
    C("reason", "VARCHAR", "why", not_null=True),
    C("raw", "VARCHAR", "the line as read", user_text=True),
    C("entry_no", "BIGINT", "the entry a rejected record came from (NULL: a line no reader took)"),
), provenance=())  # fmt: skip
DROPPED = Table("dropped_entries", "dropped", """An entry dedupe dropped: another source
already held it (overlapping exports). Kept so that removing that source restores it.""",
    ENTRIES.columns, provenance=())  # fmt: skip
SHARDS = Table("shards", "shard", """One Parquet file of one source's rows of one table. The
views over the stored tables read exactly the files listed here (a file in the folder that
is not listed is invisible, and the next ingest removes it).""", (
    C("path", "VARCHAR", "the file, relative to the shard folder (`source_id=N/<file>`)",
      key="PRIMARY KEY"),
    C("source_id", "INTEGER", "the source whose rows it holds", not_null=True),
    C("table_name", "VARCHAR", "the table (a view of that name reads it)", not_null=True),
    C("rows", "BIGINT", "rows in it"),
    C("bytes", "BIGINT", "its size on disk (checked on every open)"),
    C("sha256", "VARCHAR", "its content's hash (checked by `forensics verify`)"),
), provenance=())  # fmt: skip


# What ingest computes from the rows above and stores beside the catalog, for answers
# that would cost seconds to compute at every read; each is used only while its stamp in
# `meta` says it is this code's on this data.
NEAR = Table("derived_near", "near", """The lines near each judged request's transfer, as
`suspects` weighs them (forensics/analyses/suspects/nearby.py), and the values lines about
it name (named_levels.py): one row per predicate "a line of template T on its decode
(prefill) host within Δ before (after) its transfer" or "a line about it names agent X",
its exposure a bit per request; computed by ingest for every run, no window (the default
scope; any other scope computes them as it reads).""", (
    C("ord", "INTEGER", "the row's place in the answer's order", not_null=True),
    C("kind", "VARCHAR", "line (a predicate), known (a side's requests whose anchor and host "
      "are known), skipped (a window left out: `text` says why); named, named_known (the "
      "requests a name's values are known for) and named_skipped: the named values'",
      not_null=True),
    C("side", "VARCHAR", "decode or prefill (skipped: the factor's name; named: the value's "
      "name)"),
    C("level", "VARCHAR", "named: the value"),
    C("after", "BOOLEAN", "the window is after the transfer (a consequence)"),
    C("window_s", "DOUBLE", "Δ, seconds"),
    C("template", "UBIGINT", "the template's id"),
    C("text", "VARCHAR", "the predicate in words, quoting the template (skipped: why)",
      user_text=True, masked=True),
    C("occurrences", "BIGINT", "the distinct lines behind the exposure"),
    C("bits", "BLOB", "one bit per judged request, in the order of (run, source_id, line), "
      "big-endian within a byte (numpy's packbits)"),
), provenance=())  # fmt: skip
STORED_ANSWERS: dict[str, Table] = {NEAR.name: NEAR}


COLLECTIVES = Table(
    "collectives",
    "collective",
    "torch.distributed's watchdog on a collective (ProcessGroupNCCL): one that timed out or\n"
    "failed, which rank and process group, its sequence id, and where the group stood; and\n"
    "each entry of a Flight Recorder dump (the last collectives a rank recorded).",
    (
        C(
            "state",
            "VARCHAR",
            "timeout (it ran past its timeout) or failed (the watchdog saw it "
            "fail: an error or a timeout); a Flight Recorder entry's: scheduled, started or "
            "completed; group: a dump's process group (its members and status)",
            not_null=True,
        ),
        C("rank", "BIGINT", "the rank the watchdog ran on ([Rank N])"),
        C("pg", "BIGINT", "the process group ([PG N], [PG ID N])"),
        C("seq", "BIGINT", "the collective's sequence id (SeqNum, work sequence id)"),
        C("op", "VARCHAR", "the operation (ALLREDUCE, _ALLGATHER_BASE, BROADCAST, …)"),
        C("numel_in", "BIGINT", "elements in"),
        C("numel_out", "BIGINT", "elements out"),
        C("timeout_ms", "BIGINT", "its timeout, ms"),
        C("ran_ms", "BIGINT", "how long it ran before the watchdog said so, ms"),
        C("last_enqueued", "BIGINT", "the group's last enqueued sequence id"),
        C("last_completed", "BIGINT", "the group's last completed sequence id (-1: none)"),
        C(
            "last_started",
            "BIGINT",
            "the group's last started sequence id (-1: none; a Flight Recorder dump's pg_status)",
        ),
        C(
            "ranks",
            "VARCHAR",
            "a Flight Recorder dump's group's members, comma-separated "
            "(pg_config ranks; state group)",
        ),
    ),
)

CHECKS = Table(
    "checks",
    "check",
    "An integrity check's own line: a KV checksum, a metadata room check, a store's checksum\n"
    "(SGLang's, a vLLM connector's, vLLM-Ascend's DFX records, Mooncake Store's): what it\n"
    "found, for which request or room; `verdict` on says the check is on (its flag in the\n"
    "server arguments). The `integrity` view adds the probes' rooms and the harness's.",
    (
        C("checker", "VARCHAR", "which check: sglang_kv_checksum, sglang_metadata_room, "
          "vllm_kv_checksum, vllm_ascend_dfx, mooncake_store", not_null=True),
        C("verdict", "VARCHAR", "verified, mismatch, not_verified, or on (the check is on)",
          not_null=True),
        C("rid", "VARCHAR", "the request it names"),
        C("room", "UBIGINT", "the bootstrap_room it names"),
        C("reason", "VARCHAR", "what it says: the mismatch, why it was not verified"),
    ),
)  # fmt: skip

PATTERN_TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        TRANSFERS,
        BATCHES,
        RID_ROOMS,
        HTTP,
        REQ_STATS,
        REQUEST_META,
        REQUEST_TRACES,
        SPANS,
        EVENTS,
        SCHEDULER_STATUS,
        COLLECTIVES,
        CHECKS,
    )
}

# The catalog's own tables: DuckDB tables in the .duckdb file.
CATALOG: dict[str, Table] = {t.name: t for t in (META, RUNS, SOURCES, SHARDS)}
# The tables of sources' rows: Parquet shards, one set a source, read through views of
# these names (forensics/store/shards.py). The shard's `source_id` is its folder's name.
SHARDED: dict[str, Table] = {
    t.name: t
    for t in (ENTRIES, CHECKSUMS, CANARY, STEPS, *PATTERN_TABLES.values(), LINES, RESULTS,
              QUARANTINE, DROPPED)
}  # fmt: skip
# Every stored table, catalog first.
TABLES: dict[str, Table] = {**CATALOG, **SHARDED}
# table -> its user-text columns (C.user_text)
# the user-text columns that hold masked templates: kept readable unless they quote a prompt
MASKED: set[tuple[str, str]] = {
    (t.name, c.name) for t in SHARDED.values() for c in t.all_columns if c.masked
}
USER_TEXT: dict[str, list[str]] = {
    t.name: [c.name for c in t.all_columns if c.user_text]
    for t in SHARDED.values()
    if any(c.user_text for c in t.all_columns)
}
# What a database of schema 6 (rows in DuckDB tables) held: `forensics upgrade` reads it.
LEGACY = ("meta", "runs", "sources", "entries", "checksums", "canary", "steps", "transfers",
          "batches", "rid_rooms", "http", "req_stats", "request_meta", "events",
          "scheduler_status", "results", "quarantine")  # fmt: skip


def ddl() -> str:
    """The schema of a new catalog."""
    return "\n".join(t.ddl() for t in CATALOG.values())


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
    "rnic_inactive": "Mooncake: an RDMA context (RNIC) is not active (peer: the NIC)",
    "rnic_error": "the kernel: an mlx5 queue pair failed (peer: NIC/port)",
    "metadata_missing": "Mooncake: a peer's segment descriptor was not found (peer: its name)",
    "traceback": "a Python traceback",
    "sigquit": "a child process failed and the server is going down (SIGQUIT)",
    "crash_dump": "SGLang dumped its requests before a crash (count: unfinished; detail: file)",
    "cuda_error": "a CUDA error (illegal memory access, …)",
    "nccl_error": "an NCCL error",
    "graph_capture": "CUDA graphs captured at start-up (detail: the batch sizes)",
    "router_request": "the router finished a request (status, value: latency s)",
    "router_error": "the router got an error from a server",
    "router_retry": "the router retried a request on another pair",
    "dynamo_error": "Dynamo warned or failed on a request (rid: its x_request_id; status)",
    "transfer_throughput": "Mooncake's transfer engine throughput (value: MB/s; count: over s)",
    "ucx_error": "a UCX error (NIXL's transport; peer: the device where named)",
    "transfer_timeout": "SGLang: requests timed out bootstrapping or awaiting the KV done signal",
    "release_timeout": "KV held for a transfer released on a timeout (value: s; count: readers)",
    "expired_read": "vLLM: a decode worker read KV blocks the prefill no longer tracked (their "
    "lease may have expired): the request goes on, on blocks that may be reused",
    "bootstrap_error": "SGLang: decode could not get a prefill's info from its bootstrap server",
    "connector_failure": "vLLM's KV connector reported a transfer failure (detail: its type)",
    "crash": "a process crashed (Fatal Python error: a segfault, an abort)",
    "device_assert": "a CUDA kernel's device-side assertion failed (detail: the assertion)",
    "sglang_version": "the SGLang version, where the logs carry it (detail: the version)",
    "tcp_transport": "SGLang's Mooncake transfers forced onto TCP (MC_FORCE_TCP=1)",
}


def _columns_md(cols: tuple[C, ...]) -> list[str]:
    return ["| column | type | what it holds |", "|---|---|---|",
            *(f"| `{c.name}` | {c.type} | {c.doc} |" for c in cols)]  # fmt: skip


def markdown() -> str:
    """The tables page of the docs (docs/tables.md is this, checked by a test)."""
    out = [
        "# Stored tables",
        "",
        "Generated from `parsers/tables.py` (`python -m forensics.parsers.tables`): "
        "edit the declarations, not this page. The views over them are documented in "
        "`queries/*.sql` (`forensics query --list`).",
    ]
    for t in TABLES.values():
        if t.name in PATTERN_TABLES:
            continue
        out += ["", f"## `{t.name}`", "", t.doc.replace("\n", " "), "", *_columns_md(t.all_columns)]
    for t in STORED_ANSWERS.values():
        out += ["", f"## `{t.name}`", "", t.doc.replace("\n", " "), "", *_columns_md(t.all_columns)]
    out += [
        "",
        "# Tables SGLang's own lines fill",
        "",
        "Every one starts with the same columns, where the row came from:",
        "",
        *_columns_md(PROVENANCE),
    ]
    for t in PATTERN_TABLES.values():
        out += ["", f"## `{t.name}`", "", t.doc.replace("\n", " "), "", *_columns_md(t.columns)]
    out += ["", "## `events.kind`", "", "| kind | meaning |", "|---|---|"]
    out += [f"| `{k}` | {v} |" for k, v in EVENT_KINDS.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
