-- request_evidence: one row per harness request, with what stock SGLang (and its router)
-- logged about it and around it — no probe records needed.
--
-- Sides: the prefill and decode hosts are those whose ReqTimeStats lines (type=prefill /
-- decode) name the request's rid or room, else the hosts that logged its rid in a
-- Receive/Finish line and logged Prefill / Decode batch lines.
-- Window: decode's Receive and Finish lines for the rid where logged (clock = 'decode'),
-- else the harness's start and end (clock = 'client': another machine's clock, so
-- events on decode are matched within the window widened by one second each side).
-- Lines whose prefix has whole seconds (SGLang without SGLANG_LOG_MS=1) widen the window
-- by that resolution (`resolution_us`).
-- Events counted are those on the decode host inside the window; transfer failures and
-- aborts of other requests are counted apart from the request's own.
-- Load: the nearest Decode batch line of the decode host at or before the window's end
-- (samples, one every --decode-log-interval iterations, not the request's own step).
-- `bs_captured`: whether that line's #running-req is one of the batch sizes the decode
-- host captured CUDA graphs for (NULL: no capture line or no batch line); a size that
-- is not captured runs padded to the next one. Rows are not sorted.
--
-- @depends result_links
--
-- @column run                 VARCHAR  the run the results were ingested under
-- @column session             VARCHAR  harness session
-- @column round               BIGINT   round within the session
-- @column rid                 VARCHAR  request id
-- @column room                UBIGINT  bootstrap_room (see result_links)
-- @column status              VARCHAR  the harness's status
-- @column corrupted           BOOLEAN  the harness marked the response corrupted
-- @column reason              VARCHAR  the harness's reason
-- @column concurrency         BIGINT   requests in flight when it was sent (the harness's count)
-- @column evidence_run        VARCHAR  the run whose lines are matched (see result_links)
-- @column prefill_host        VARCHAR  host that prefilled it
-- @column decode_host         VARCHAR  host that decoded it
-- @column clock               VARCHAR  decode (window from decode's lines) or client (the harness's)
-- @column window_start_us     BIGINT   window start, µs since the epoch, on `clock`
-- @column window_end_us       BIGINT   window end, µs
-- @column resolution_us       BIGINT   time resolution of the decode host's SGLang lines, µs (1 or 1,000,000)
-- @column input_len           BIGINT   prompt tokens (ReqTimeStats)
-- @column cached_input_len    BIGINT   prompt tokens from the prefix cache (prefill's ReqTimeStats)
-- @column output_len          BIGINT   tokens generated (decode's ReqTimeStats)
-- @column attempts            BIGINT   attempts (decode's ReqTimeStats, newer versions)
-- @column prefill_retries     BIGINT   prefill's transfer #retries
-- @column prefill_queue_ms    DOUBLE   prefill: waiting queue, ms
-- @column prefill_forward_ms  DOUBLE   prefill: forward, ms
-- @column transfer_speed_gb_s DOUBLE   prefill: KV transfer speed, GB/s
-- @column decode_prealloc_ms  DOUBLE   decode: pre-allocation queue, ms
-- @column decode_transfer_ms  DOUBLE   decode: waiting for the KV transfer, ms
-- @column decode_queue_ms     DOUBLE   decode: waiting queue, ms
-- @column decode_forward_ms   DOUBLE   decode: forward until completion, ms
-- @column finish_type         VARCHAR  meta_info finish_reason.type (stop, length, abort)
-- @column finish_message      VARCHAR  meta_info finish_reason.message (an abort's reason)
-- @column num_retractions     BIGINT   meta_info num_retractions
-- @column cached_tokens       BIGINT   meta_info cached_tokens
-- @column e2e_latency         DOUBLE   meta_info e2e_latency, s
-- @column dp_rank             BIGINT   meta_info dp_rank
-- @column own_transfer_failed BOOLEAN  a transfer failure names this request (rid or room)
-- @column own_abort           BOOLEAN  an abort line names this request's rid or room
-- @column other_transfer_failures BIGINT transfer failures of other requests on the decode host in the window
-- @column other_aborts        BIGINT   aborts of other requests on the decode host in the window
-- @column retractions         BIGINT   requests retracted on the decode host in the window (sum of #retracted_reqs)
-- @column lost_connections    BIGINT   lost-connection lines on the decode host in the window
-- @column errors              BIGINT   tracebacks, CUDA and NCCL errors on the decode host in the window
-- @column transfer_layer      BIGINT   other transfer-layer errors there (session, AUX_DATA, index, slice)
-- @column running_req         BIGINT   decode load: #running-req of the nearest Decode batch line
-- @column token_usage         DOUBLE   decode load: token usage of that line
-- @column load_lag_ms         DOUBLE   how long before the window's end that line was, ms
-- @column max_running_req     BIGINT   the most #running-req a Decode batch line gave in the window
-- @column bs_captured         BOOLEAN  running_req is a captured CUDA-graph batch size (see above)
WITH stats AS (
    -- one ReqTimeStats row per (run, key, side): by rid and by room
    SELECT run, rid AS k_rid, NULL::UBIGINT AS k_room, type, arg_max(s, ts_us) AS s
    FROM req_stats s WHERE rid IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT run, NULL, room, type, arg_max(s, ts_us) FROM req_stats s
    WHERE room IS NOT NULL GROUP BY ALL
), prefill_hosts AS (
    SELECT DISTINCT run, host FROM batches WHERE phase = 'Prefill'
), decode_hosts AS (
    SELECT DISTINCT run, host FROM batches WHERE phase = 'Decode'
), logged AS (
    SELECT r.run, r.rid, r.host,
           min(r.ts_us) FILTER (WHERE r.event = 'Receive') AS receive_us,
           max(r.ts_us) FILTER (WHERE r.event = 'Finish') AS finish_us
    FROM rid_rooms r WHERE r.rid IS NOT NULL GROUP BY ALL
), base AS (
    SELECT l.*,
           coalesce(pr.s, pm.s) AS p, coalesce(dr.s, dm.s) AS d
    FROM result_links l
    LEFT JOIN stats pr ON pr.run = l.evidence_run AND pr.k_rid = l.rid AND pr.type = 'prefill'
    LEFT JOIN stats pm ON pm.run = l.evidence_run AND pm.k_room = l.linked_room
                      AND pm.type = 'prefill'
    LEFT JOIN stats dr ON dr.run = l.evidence_run AND dr.k_rid = l.rid AND dr.type = 'decode'
    LEFT JOIN stats dm ON dm.run = l.evidence_run AND dm.k_room = l.linked_room
                      AND dm.type = 'decode'
), sided AS (
    SELECT b.*,
           coalesce(b.p.host, (SELECT min(g.host) FROM logged g JOIN prefill_hosts h
                                 ON h.run = g.run AND h.host = g.host
                               WHERE g.run = b.evidence_run AND g.rid = b.rid)) AS prefill_host,
           coalesce(b.d.host, (SELECT min(g.host) FROM logged g JOIN decode_hosts h
                                 ON h.run = g.run AND h.host = g.host
                               WHERE g.run = b.evidence_run AND g.rid = b.rid)) AS decode_host
    FROM base b
), resolution AS (
    -- whole-second prefixes: every SGLang line of the host on a second
    SELECT run, host,
           CASE WHEN bool_and(ts_us % 1000000 = 0) THEN 1000000 ELSE 1 END::BIGINT AS resolution_us
    FROM (SELECT run, host, ts_us FROM batches UNION ALL SELECT run, host, ts_us FROM events
          UNION ALL SELECT run, host, ts_us FROM rid_rooms)
    GROUP BY ALL
), windowed AS (
    SELECT s.*, g.receive_us, g.finish_us, coalesce(res.resolution_us, 1)::BIGINT AS resolution_us,
           CASE WHEN g.receive_us IS NOT NULL AND g.finish_us IS NOT NULL
                THEN 'decode' ELSE 'client' END AS clock
    FROM sided s
    LEFT JOIN logged g ON g.run = s.evidence_run AND g.rid = s.rid
                      AND g.host IS NOT DISTINCT FROM s.decode_host
    LEFT JOIN resolution res ON res.run = s.evidence_run
                            AND res.host IS NOT DISTINCT FROM s.decode_host
), win AS (
    SELECT w.*,
           CASE w.clock WHEN 'decode' THEN w.receive_us ELSE w.start_us END AS window_start_us,
           CASE w.clock WHEN 'decode' THEN w.finish_us ELSE w.end_us END AS window_end_us,
           greatest(w.resolution_us, CASE w.clock WHEN 'client' THEN 1000000 ELSE 0 END)
               AS slack_us
    FROM windowed w
), near AS (
    -- every event of the decode host within the widened window
    SELECT w.run, w.rid, w.linked_room, e.kind, e.rid AS e_rid, e.room AS e_room, e.count
    FROM win w JOIN events e
      ON e.run = w.evidence_run AND e.host = w.decode_host
     AND e.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
), near_t AS (
    SELECT w.run, w.rid, w.linked_room, t.rid AS t_rid, t.room AS t_room
    FROM win w JOIN transfers t
      ON t.run = w.evidence_run AND t.host = w.decode_host
     AND t.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
), ev AS (
    SELECT run, rid, linked_room,
           count(*) FILTER (WHERE kind IN ('abort', 'oom_abort', 'too_long', 'abort_ack')
                            AND e_rid IS DISTINCT FROM rid
                            AND e_room IS DISTINCT FROM linked_room) AS other_aborts,
           coalesce(sum(count) FILTER (WHERE kind = 'retract'), 0) AS retractions,
           count(*) FILTER (WHERE kind = 'lost_connection') AS lost_connections,
           count(*) FILTER (WHERE kind IN ('traceback', 'cuda_error', 'nccl_error')) AS errors,
           count(*) FILTER (WHERE kind IN ('session_failed', 'aux_mismatch', 'index_mismatch',
                                           'slice_failed', 'room_failed')) AS transfer_layer
    FROM near GROUP BY ALL
), tv AS (
    SELECT run, rid, linked_room,
           count(*) FILTER (WHERE t_rid IS DISTINCT FROM rid
                            AND t_room IS DISTINCT FROM linked_room) AS other_transfer_failures
    FROM near_t GROUP BY ALL
), own AS (
    SELECT w.run, w.rid, w.linked_room,
           bool_or(t.pattern IS NOT NULL) AS own_transfer_failed
    FROM win w LEFT JOIN transfers t
      ON t.run = w.evidence_run AND (t.rid = w.rid OR t.room = w.linked_room)
    GROUP BY ALL
), own_abort AS (
    SELECT w.run, w.rid, w.linked_room, bool_or(e.kind IS NOT NULL) AS own_abort
    FROM win w LEFT JOIN events e
      ON e.run = w.evidence_run AND e.kind IN ('abort', 'oom_abort', 'too_long', 'abort_ack')
     AND (e.rid = w.rid OR e.room = w.linked_room)
    GROUP BY ALL
), meta AS (
    SELECT run, rid, arg_max(m, (finish_type IS NOT NULL, ts_us)) AS m
    FROM request_meta m WHERE rid IS NOT NULL GROUP BY ALL
), decode_batches AS (
    SELECT run, host, ts_us, running_req, token_usage FROM batches
    WHERE phase = 'Decode' AND running_req IS NOT NULL
), load AS (
    SELECT w.run, w.rid, w.linked_room, b.running_req, b.token_usage,
           (w.window_end_us - b.ts_us) / 1000.0 AS load_lag_ms
    FROM win w ASOF LEFT JOIN decode_batches b
      ON b.run = w.evidence_run AND b.host = w.decode_host
     AND b.ts_us <= w.window_end_us + w.slack_us
), peak AS (
    SELECT w.run, w.rid, w.linked_room, max(b.running_req) AS max_running_req
    FROM win w JOIN decode_batches b
      ON b.run = w.evidence_run AND b.host = w.decode_host
     AND b.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
    GROUP BY ALL
), captured AS (
    SELECT run, host,
           list_distinct(flatten(list(
               list_transform(string_split(replace(detail, ' ', ''), ','), lambda x: TRY_CAST(x AS BIGINT))
           ))) AS sizes
    FROM events WHERE kind = 'graph_capture' AND detail <> '' GROUP BY ALL
)
SELECT w.run, w.session, w.round, w.rid, w.linked_room AS room, w.status, w.corrupted,
       w.reason, w.concurrency, w.evidence_run, w.prefill_host, w.decode_host, w.clock,
       w.window_start_us, w.window_end_us, w.resolution_us,
       coalesce(w.d.input_len, w.p.input_len) AS input_len,
       w.p.cached_input_len AS cached_input_len, w.d.output_len AS output_len,
       w.d.attempts AS attempts, w.p.retries AS prefill_retries,
       w.p.queue_ms AS prefill_queue_ms, w.p.forward_ms AS prefill_forward_ms,
       w.p.transfer_speed_gb_s AS transfer_speed_gb_s,
       w.d.prealloc_queue_ms AS decode_prealloc_ms, w.d.transfer_ms AS decode_transfer_ms,
       w.d.queue_ms AS decode_queue_ms, w.d.forward_ms AS decode_forward_ms,
       m.m.finish_type AS finish_type, m.m.finish_message AS finish_message,
       m.m.num_retractions AS num_retractions, m.m.cached_tokens AS cached_tokens,
       m.m.e2e_latency AS e2e_latency, m.m.dp_rank AS dp_rank,
       coalesce(o.own_transfer_failed, false) AS own_transfer_failed,
       coalesce(oa.own_abort, false) AS own_abort,
       coalesce(tv.other_transfer_failures, 0) AS other_transfer_failures,
       coalesce(ev.other_aborts, 0) AS other_aborts,
       coalesce(ev.retractions, 0)::BIGINT AS retractions,
       coalesce(ev.lost_connections, 0) AS lost_connections,
       coalesce(ev.errors, 0) AS errors, coalesce(ev.transfer_layer, 0) AS transfer_layer,
       ld.running_req, ld.token_usage, ld.load_lag_ms, pk.max_running_req,
       CASE WHEN c.sizes IS NULL OR ld.running_req IS NULL THEN NULL
            ELSE list_contains(c.sizes, ld.running_req) END AS bs_captured
FROM win w
LEFT JOIN ev ON ev.run = w.run AND ev.rid = w.rid
           AND ev.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN tv ON tv.run = w.run AND tv.rid = w.rid
           AND tv.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN own o ON o.run = w.run AND o.rid = w.rid
               AND o.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN own_abort oa ON oa.run = w.run AND oa.rid = w.rid
                      AND oa.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN meta m ON m.run = w.evidence_run AND m.rid = w.rid
LEFT JOIN load ld ON ld.run = w.run AND ld.rid = w.rid
                 AND ld.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN peak pk ON pk.run = w.run AND pk.rid = w.rid
                 AND pk.linked_room IS NOT DISTINCT FROM w.linked_room
LEFT JOIN captured c ON c.run = w.evidence_run AND c.host IS NOT DISTINCT FROM w.decode_host
