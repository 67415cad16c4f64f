-- request_features: one row per harness request, with every factor `forensics suspects`
-- weighs against its outcome: the harness's own fields (round, step, concurrency,
-- tokens), stock SGLang's evidence from `request_evidence` and the probe evidence from
-- `requests`; what Dynamo's request trace measured of it (`request_traces`' request_end
-- row whose x_request_id is its rid: the reproducer sends its rid as X-Request-Id); whether
-- a span of a trace that names it (rid or x_request_id) ended in ERROR; which rank of its
-- prefill or decode host the Flight Recorder dumps say stopped first (as flight.py reads
-- them: the rank whose last collective is behind its group's).
--
-- A factor SGLang did not log is NULL, not zero: token counts come from ReqTimeStats,
-- else SGLang's meta_info, else the reply's usage; events on the decode host are NULL
-- where the decode host is not known (nothing was matched, so nothing is absent).
-- Outcome columns (`corrupted`, `status`) are here to be tested against, never as
-- factors. Rows are not sorted.
--
-- @depends request_evidence
-- @depends requests
-- @depends fail_open
--
-- @column run                     VARCHAR  the run the results were ingested under
-- @column source_id               INTEGER  the results file
-- @column line                    BIGINT   its line
-- @column session                 VARCHAR  harness session
-- @column rid                     VARCHAR  request id
-- @column status                  VARCHAR  the harness's status (outcome)
-- @column corrupted               BOOLEAN  the harness marked the response corrupted (outcome)
-- @column round                   BIGINT   round within the session
-- @column step                    BIGINT   the harness's step within the round (tool-call turns)
-- @column session_rounds          BIGINT   requests the harness sent in this session
-- @column attempt                 BIGINT   the harness's attempt (a retry of a failed request is 2, …)
-- @column concurrency             BIGINT   requests in flight when it was sent
-- @column seconds_into_run        DOUBLE   seconds from the run's first request to this one's send
-- @column prompt_tokens           BIGINT   prompt tokens (ReqTimeStats, else meta_info, else usage)
-- @column cached_tokens           BIGINT   prompt tokens served from the prefix cache
-- @column output_tokens           BIGINT   tokens generated
-- @column num_retractions         BIGINT   times SGLang retracted it (meta_info, SGLang's or the reply's)
-- @column attempts                BIGINT   SGLang's attempts (decode's ReqTimeStats, newer versions)
-- @column prefill_retries         BIGINT   prefill's transfer #retries
-- @column prefill_queue_ms        DOUBLE   prefill: waiting queue, ms
-- @column transfer_speed_gb_s     DOUBLE   prefill: KV transfer speed, GB/s
-- @column decode_prealloc_ms      DOUBLE   decode: pre-allocation queue, ms
-- @column decode_transfer_ms      DOUBLE   decode: waiting for the KV transfer, ms
-- @column decode_queue_ms         DOUBLE   decode: waiting queue, ms
-- @column prefill_host            VARCHAR  host that prefilled it
-- @column decode_host             VARCHAR  host that decoded it
-- @column host_pair               VARCHAR  prefill host → decode host (NULL: a side not known)
-- @column dp_rank                 BIGINT   data-parallel rank (meta_info)
-- @column anchor                  VARCHAR  what its transfer is timed by: transfer (decode's checksum record), decode (Receive) or client (send)
-- @column clock                   VARCHAR  its window: decode (Receive→Finish on decode) or client (send→reply)
-- @column running_req             BIGINT   decode load: #running-req of the nearest Decode batch line
-- @column max_running_req         BIGINT   the most #running-req logged on its decode host in its window
-- @column token_usage             DOUBLE   decode load: KV token usage of that line
-- @column status_peers            BIGINT   the most requests running beside it in a scheduler.status snapshot
-- @column nic_pair                VARCHAR  the RDMA NIC pair Mooncake's failures near its transfer name ('(none)': none)
-- @column bs_captured             BOOLEAN  its decode batch size was a captured CUDA-graph size (false: padded)
-- @column own_abort               BOOLEAN  an abort line names it
-- @column own_kv_expired          BOOLEAN  its KV blocks were released on a lease's expiry, or read after it (vLLM's NIXL)
-- @column own_transfer_failed     BOOLEAN  a transfer failure names it
-- @column answered_failed         BOOLEAN  a transfer failure names it and no retry under another room recovered it (fail_open)
-- @column other_aborts            BIGINT   aborts of other requests on its decode host in its window
-- @column other_transfer_failures BIGINT   transfer failures of other requests there
-- @column retractions             BIGINT   requests retracted there (sum of #retracted_reqs)
-- @column lost_connections        BIGINT   lost-connection lines there
-- @column errors                  BIGINT   tracebacks, CUDA and NCCL errors there
-- @column transfer_layer          BIGINT   other transfer-layer errors there
-- @column trace_ttft_ms           DOUBLE   time to first token, ms (Dynamo's request trace, by X-Request-Id)
-- @column trace_prefill_wait_ms   DOUBLE   the router's wait for a prefill worker, ms (its trace)
-- @column trace_kv_transfer_ms    DOUBLE   the router's estimate of its KV transfer, ms (its trace)
-- @column trace_kv_hit_rate       DOUBLE   share of its prompt's KV blocks found cached (its trace)
-- @column span_error              BOOLEAN  a span of its OpenTelemetry trace has status ERROR (NULL: no span names it)
-- @column stopped_rank            VARCHAR  the rank of its decode (else prefill) host that stopped first, at which collective ('(none)': none there; NULL: no dumps)
-- @column verdict                 VARCHAR  its room's worst checksum verdict (probes; NULL without)
-- @column steps                   BIGINT   decode steps a canary recorded it in (probes)
-- @column unexpected_steps        BIGINT   of those, steps with unexpected page writes
WITH harness AS (
    SELECT source_id, line,
           TRY_CAST(json_extract_string(extra, '$.step') AS BIGINT) AS step,
           TRY_CAST(json_extract_string(extra, '$.attempt') AS BIGINT) AS attempt,
           TRY_CAST(json_extract_string(extra, '$.usage.prompt_tokens') AS BIGINT) AS u_prompt,
           TRY_CAST(json_extract_string(extra, '$.usage.completion_tokens') AS BIGINT) AS u_out,
           TRY_CAST(json_extract_string(extra, '$.meta_info.prompt_tokens') AS BIGINT) AS m_prompt,
           TRY_CAST(json_extract_string(extra, '$.meta_info.cached_tokens') AS BIGINT) AS m_cached,
           TRY_CAST(json_extract_string(extra, '$.meta_info.completion_tokens') AS BIGINT) AS m_out,
           TRY_CAST(json_extract_string(extra, '$.meta_info.num_retractions') AS BIGINT) AS m_retr,
           TRY_CAST(json_extract_string(extra, '$.meta_info.dp_rank') AS BIGINT) AS m_dp,
           count(*) OVER (PARTITION BY run, session) AS session_rounds,
           (start_us - min(start_us) OVER (PARTITION BY run)) / 1e6 AS seconds_into_run
    FROM results
), traced AS (
    -- a request's last request_end row (a retry through the frontend writes another)
    SELECT run, x_request_id,
           arg_max(ttft_ms, ts_us) AS ttft_ms, arg_max(prefill_wait_time_ms, ts_us) AS wait_ms,
           arg_max(kv_transfer_estimated_latency_ms, ts_us) AS kv_ms,
           arg_max(kv_hit_rate, ts_us) AS kv_hit_rate
    FROM request_traces
    WHERE event_type = 'request_end' AND x_request_id IS NOT NULL
    GROUP BY ALL
), spanned AS (
    -- SGLang names the rid on its root span only: the whole trace counts
    SELECT k.run, k.key, bool_or(p.status = 'ERROR') AS span_error
    FROM (SELECT run, trace_id, rid AS key FROM spans WHERE rid IS NOT NULL
          UNION SELECT run, trace_id, x_request_id FROM spans WHERE x_request_id IS NOT NULL) k
    JOIN spans p USING (run, trace_id)
    GROUP BY ALL
), last_collective AS (
    SELECT run, pg, rank, any_value(host) AS host, max(seq) AS seq, arg_max(op, seq) AS op
    FROM collectives
    WHERE pattern = 'flight_recorder_entry' AND rank IS NOT NULL AND seq IS NOT NULL
    GROUP BY run, pg, rank
), behind AS (
    SELECT *, min(seq) OVER g AS low, max(seq) OVER g AS top, count(*) OVER g AS ranks
    FROM last_collective WINDOW g AS (PARTITION BY run, pg)
), stopped AS (
    SELECT run, host,
           string_agg(host || ' rank ' || rank || ' at seq ' || seq || ' (' || coalesce(op, '?')
                      || ')', '; ' ORDER BY pg, rank) AS what
    FROM behind WHERE ranks > 1 AND seq = low AND low < top
    GROUP BY run, host
), dumped AS (
    SELECT DISTINCT run FROM last_collective
)
SELECT e.run, e.source_id, e.line, e.session, e.rid, e.status, e.corrupted, e.round,
       h.step, h.session_rounds, h.attempt, e.concurrency, h.seconds_into_run,
       coalesce(e.input_len, h.m_prompt, h.u_prompt) AS prompt_tokens,
       coalesce(e.cached_input_len, e.cached_tokens, h.m_cached) AS cached_tokens,
       coalesce(e.output_len, h.m_out, h.u_out) AS output_tokens,
       coalesce(e.num_retractions, h.m_retr) AS num_retractions,
       e.attempts, e.prefill_retries, e.prefill_queue_ms, e.transfer_speed_gb_s,
       e.decode_prealloc_ms, e.decode_transfer_ms, e.decode_queue_ms,
       e.prefill_host, e.decode_host, e.prefill_host || ' → ' || e.decode_host AS host_pair,
       coalesce(e.dp_rank, h.m_dp) AS dp_rank, e.anchor, e.clock,
       e.running_req, e.max_running_req, e.token_usage, e.status_peers, e.nic_pair, e.bs_captured,
       e.own_abort, e.own_kv_expired, e.own_transfer_failed,
       coalesce(e.own_transfer_failed, false)
           AND NOT coalesce(fo.recovered, false) AS answered_failed,
       CASE WHEN e.decode_host IS NOT NULL THEN e.other_aborts END AS other_aborts,
       CASE WHEN e.decode_host IS NOT NULL THEN e.other_transfer_failures END
           AS other_transfer_failures,
       CASE WHEN e.decode_host IS NOT NULL THEN e.retractions END AS retractions,
       CASE WHEN e.decode_host IS NOT NULL THEN e.lost_connections END AS lost_connections,
       CASE WHEN e.decode_host IS NOT NULL THEN e.errors END AS errors,
       CASE WHEN e.decode_host IS NOT NULL THEN e.transfer_layer END AS transfer_layer,
       tr.ttft_ms AS trace_ttft_ms, tr.wait_ms AS trace_prefill_wait_ms,
       tr.kv_ms AS trace_kv_transfer_ms, tr.kv_hit_rate AS trace_kv_hit_rate, sp.span_error,
       CASE WHEN du.run IS NOT NULL THEN coalesce(sd.what, spre.what, '(none)') END
           AS stopped_rank,
       r.verdict, r.steps, r.unexpected_steps
FROM request_evidence e
JOIN requests r USING (source_id, line)
JOIN harness h USING (source_id, line)
LEFT JOIN fail_open fo USING (source_id, line)
LEFT JOIN traced tr ON tr.run = e.evidence_run AND tr.x_request_id = e.rid
LEFT JOIN spanned sp ON sp.run = e.evidence_run AND sp.key = e.rid
LEFT JOIN dumped du ON du.run = e.evidence_run
LEFT JOIN stopped sd ON sd.run = e.evidence_run AND sd.host = e.decode_host
LEFT JOIN stopped spre ON spre.run = e.evidence_run AND spre.host = e.prefill_host
