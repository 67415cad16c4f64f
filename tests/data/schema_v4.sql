-- The schema of version 4 (pd-forensics before stock evidence), frozen: the test that
-- migrations bring it to the declared schema starts here.
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE runs (
    run       VARCHAR PRIMARY KEY,
    tags      MAP(VARCHAR, VARCHAR),
    created   TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE TABLE sources (
    source_id    INTEGER PRIMARY KEY,
    run          VARCHAR NOT NULL,
    path         VARCHAR NOT NULL,
    sha256       VARCHAR NOT NULL UNIQUE,
    bytes        BIGINT,
    format       VARCHAR,
    compression  VARCHAR,
    lines        BIGINT,
    entries      BIGINT,
    duplicates   BIGINT,
    rejoined     BIGINT,
    quarantined  BIGINT,
    markers      BIGINT,
    notes        VARCHAR[],
    ingested_at  TIMESTAMPTZ DEFAULT current_timestamp
);
-- Messages are most of the bytes: zstd stores them 2.5x smaller and twice as fast as the
-- default string compression (measured on the benchmark journal).
CREATE TABLE entries (
    source_id    INTEGER NOT NULL,
    entry_no     BIGINT NOT NULL,
    ts_us        BIGINT,
    mono_us      BIGINT,
    boot_id      VARCHAR,
    host         VARCHAR,
    unit         VARCHAR,
    ident        VARCHAR,
    pid          BIGINT,
    priority     TINYINT,
    message      VARCHAR USING COMPRESSION zstd,
    message_raw  BLOB,
    cursor       VARCHAR,
    line_first   BIGINT,
    line_last    BIGINT,
    truncated    BOOLEAN,
    invalid_utf8 BOOLEAN,
    line_break   VARCHAR,
    fields       VARCHAR USING COMPRESSION zstd,
    parts        SMALLINT NOT NULL DEFAULT 1,
    key          UBIGINT NOT NULL
);
-- Forensic records (docs/log-contract.md). Each row keeps where it came from: the run,
-- the host and time of its journal entry, and (source_id, entry_no) of that entry.
CREATE TABLE checksums (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    side VARCHAR NOT NULL, room UBIGINT NOT NULL, rid VARCHAR, buf VARCHAR NOT NULL,
    layer VARCHAR, tp BIGINT, dtype VARCHAR, nbytes BIGINT,
    head VARCHAR, tail VARCHAR, "full" VARCHAR, extra VARCHAR
);
CREATE TABLE canary (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    step BIGINT NOT NULL, layer BIGINT NOT NULL, bs BIGINT, mode VARCHAR,
    expected BIGINT[], changed BIGINT[], unexpected BIGINT[],
    n_expected BIGINT, n_changed BIGINT, n_unexpected BIGINT, extra VARCHAR
);
CREATE TABLE steps (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL,
    step BIGINT NOT NULL, bs BIGINT,
    rids VARCHAR,  -- the batch's request ids, comma-separated ('' when it logged none)
    rooms VARCHAR, -- the batch's rooms, comma-separated
    extra VARCHAR
);
-- SGLang's own transfer events (built-in patterns, parsers/patterns/sglang.toml):
-- failures, timeouts, context corruption, native checksum aborts.
CREATE TABLE transfers (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL, pattern VARCHAR NOT NULL,
    side VARCHAR, rank BIGINT, rid VARCHAR, room UBIGINT, other_room UBIGINT,
    exception VARCHAR, reason VARCHAR
);
-- SGLang scheduler batch statistics ("Prefill batch" / "Decode batch" lines, every
-- spelling); ranks is the log prefix's "DP0 TP0 EP0" part.
CREATE TABLE batches (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL, pattern VARCHAR NOT NULL,
    phase VARCHAR NOT NULL, ranks VARCHAR, forward_ct BIGINT,
    new_seq BIGINT, new_token BIGINT, cached_token BIGINT, token BIGINT, full_token BIGINT,
    swa_token BIGINT, token_usage DOUBLE, full_token_usage DOUBLE, swa_token_usage DOUBLE,
    mamba_usage DOUBLE, pre_allocated_usage DOUBLE, running_req BIGINT, queue_req BIGINT,
    prealloc_req BIGINT, inflight_req BIGINT, transfer_req BIGINT, retracted_req BIGINT,
    pending_token BIGINT, accept_len DOUBLE, accept_rate DOUBLE, cuda_graph BOOLEAN,
    npu_graph BOOLEAN, input_throughput DOUBLE, gen_throughput DOUBLE, extra VARCHAR
);
-- SGLang's --log-requests lines: which room each rid was given (Receive / Finish).
CREATE TABLE rid_rooms (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL, pattern VARCHAR NOT NULL,
    event VARCHAR NOT NULL, rid VARCHAR, room UBIGINT NOT NULL
);
-- uvicorn access lines of the HTTP servers.
CREATE TABLE http (
    run VARCHAR NOT NULL, host VARCHAR, ts_us BIGINT, source_id INTEGER NOT NULL,
    entry_no BIGINT NOT NULL, pattern VARCHAR NOT NULL,
    client VARCHAR, method VARCHAR NOT NULL, path VARCHAR, status BIGINT
);
-- The reproducer harness: one row per request it sent, marked ok or corrupted.
CREATE TABLE results (
    run VARCHAR NOT NULL, source_id INTEGER NOT NULL, line BIGINT,
    session VARCHAR NOT NULL, round BIGINT, rid VARCHAR NOT NULL, room UBIGINT,
    corrupted BOOLEAN NOT NULL, reason VARCHAR, start_us BIGINT, end_us BIGINT,
    concurrency BIGINT, extra VARCHAR, status VARCHAR
);
CREATE TABLE quarantine (
    source_id INTEGER NOT NULL,
    line      BIGINT,
    reason    VARCHAR NOT NULL,
    raw       VARCHAR
);
