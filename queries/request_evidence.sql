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
-- is not captured runs padded to the next one. Peers: the decode host's scheduler.status
-- snapshots in the window that list the request as running (a sample every
-- SGLANG_LOG_SCHEDULER_STATUS_INTERVAL seconds, not its every step). NIC pair: the NIC
-- (and peer NIC) that Mooncake's RDMA failures name on its prefill or decode host in the
-- widened window, the most named one (`host:local → peer-ip@peer-nic`, the port dropped:
-- a pair, not a process); '(none)' where its decode host is known and none was named.
-- Anchor: the time its transfer is weighed from — the transfer's end where decode logged
-- it (the probes' `forensics:checksum side=dst` record of its room on its decode host),
-- else decode's Receive, else the client's send. Transfer end: where a line marks when
-- its bytes were in — the probes' record of their arrival, else decode's Receive plus its
-- ReqTimeStats' pre-allocation and transfer waits, else its first decode step (step
-- records) — the edge `suspects` measures "after its transfer" from: a line between the
-- anchor and this end was logged while the transfer ran ("during"), not after it. Rows
-- are not sorted.
--
-- @depends result_links
-- @depends requests
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
-- @column anchor              VARCHAR  what its transfer is timed by: transfer (decode's checksum of the bytes received), decode (decode's Receive) or client (the harness's send)
-- @column anchor_us           BIGINT   that time, µs since the epoch
-- @column transfer_end        VARCHAR  what marks its transfer's end: transfer (the probes' arrival record), time_stats (Receive + decode's pre-allocation and transfer waits) or first_step (its first decode step); NULL: nothing on decode's clock does
-- @column transfer_end_us     BIGINT   that time, µs since the epoch (decode's clock)
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
-- @column own_kv_expired      BOOLEAN  its KV blocks were released on a lease's expiry, or read after it (vLLM's NIXL lines name its rid)
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
-- @column status_samples      BIGINT   scheduler.status snapshots on the decode host in the window that list it running
-- @column status_peers        BIGINT   the most other requests running beside it in one of those snapshots
-- @column nic_pair            VARCHAR  the RDMA NIC pair Mooncake's failures near it name ('(none)': none named)
-- @column source_id           INTEGER  the results file (with `line`, the key of a result)
-- @column line                BIGINT   its line
WITH stats AS (
    -- one ReqTimeStats row per (run, key, side): by rid and by room
    SELECT run, rid AS k_rid, NULL::UBIGINT AS k_room, type, arg_max(s, ts_us) AS s
    FROM req_stats s WHERE rid IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT run, NULL, room, type, arg_max(s, ts_us) FROM req_stats s
    WHERE room IS NOT NULL GROUP BY ALL
), phase_hosts AS (
    SELECT DISTINCT run, host, phase FROM batches
), logged AS (
    SELECT r.run, r.rid, r.host,
           min(r.ts_us) FILTER (WHERE r.event = 'Receive') AS receive_us,
           max(r.ts_us) FILTER (WHERE r.event = 'Finish') AS finish_us
    FROM rid_rooms r WHERE r.rid IS NOT NULL GROUP BY ALL
), logged_side AS (
    -- the hosts that logged a rid, by the phase of their batch lines
    SELECT g.run, g.rid, min(g.host) FILTER (WHERE h.phase = 'Prefill') AS prefill_host,
           min(g.host) FILTER (WHERE h.phase = 'Decode') AS decode_host
    FROM logged g JOIN phase_hosts h ON h.run = g.run AND h.host = g.host
    GROUP BY ALL
), base AS (
    -- a result is (source_id, line): the key every CTE below joins back on
    SELECT l.*, coalesce(pr.s, pm.s) AS p, coalesce(dr.s, dm.s) AS d
    FROM result_links l
    LEFT JOIN stats pr ON pr.run = l.evidence_run AND pr.k_rid = l.rid AND pr.type = 'prefill'
    LEFT JOIN stats pm ON pm.run = l.evidence_run AND pm.k_room = l.linked_room
                      AND pm.type = 'prefill'
    LEFT JOIN stats dr ON dr.run = l.evidence_run AND dr.k_rid = l.rid AND dr.type = 'decode'
    LEFT JOIN stats dm ON dm.run = l.evidence_run AND dm.k_room = l.linked_room
                      AND dm.type = 'decode'
), sided AS (
    SELECT b.*, coalesce(b.p.host, ls.prefill_host) AS prefill_host,
           coalesce(b.d.host, ls.decode_host) AS decode_host
    FROM base b LEFT JOIN logged_side ls ON ls.run = b.evidence_run AND ls.rid = b.rid
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
), happened AS (
    -- SGLang's events and transfer failures as one stream (transfers as kind 'transfer')
    SELECT run, host, ts_us, kind, rid, room, count FROM events
    UNION ALL
    SELECT run, host, ts_us, 'transfer', rid, room, NULL FROM transfers
), near AS (
    -- what happened on the decode host within the widened window, and whether it names
    -- this request
    SELECT w.source_id, w.line, h.kind, h.count,
           -- NULL is no match: a line without a room is not about a request without one
           coalesce(h.rid = w.rid, false) OR coalesce(h.room = w.linked_room, false) AS own
    FROM win w JOIN happened h
      ON h.run = w.evidence_run AND h.host = w.decode_host
     AND h.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
), counted AS (
    SELECT source_id, line,
           count(*) FILTER (WHERE kind = 'transfer' AND NOT own) AS other_transfer_failures,
           count(*) FILTER (WHERE kind IN ('abort', 'oom_abort', 'too_long', 'abort_ack')
                            AND NOT own) AS other_aborts,
           coalesce(sum(count) FILTER (WHERE kind = 'retract'), 0) AS retractions,
           count(*) FILTER (WHERE kind = 'lost_connection') AS lost_connections,
           count(*) FILTER (WHERE kind IN ('traceback', 'cuda_error', 'nccl_error')) AS errors,
           count(*) FILTER (WHERE kind IN ('session_failed', 'aux_mismatch', 'index_mismatch',
                                           'slice_failed', 'room_failed')) AS transfer_layer
    FROM near GROUP BY ALL
), named AS (
    -- lines anywhere in the run naming the request: two equi-joins, not an OR (a nested
    -- loop), as requests.sql does
    SELECT w.source_id, w.line, h.kind FROM win w
    JOIN happened h ON h.run = w.evidence_run AND h.rid = w.rid
    UNION
    SELECT w.source_id, w.line, h.kind FROM win w
    JOIN happened h ON h.run = w.evidence_run AND h.room = w.linked_room
), own AS (
    SELECT source_id, line, bool_or(kind = 'transfer') AS own_transfer_failed,
           bool_or(kind IN ('abort', 'oom_abort', 'too_long', 'abort_ack')) AS own_abort,
           bool_or(kind IN ('release_timeout', 'expired_read')) AS own_kv_expired
    FROM named GROUP BY ALL
), meta AS (
    SELECT run, rid, arg_max(m, (finish_type IS NOT NULL, ts_us)) AS m
    FROM request_meta m WHERE rid IS NOT NULL GROUP BY ALL
), decode_batches AS (
    SELECT run, host, ts_us, running_req, token_usage FROM batches
    WHERE phase = 'Decode' AND running_req IS NOT NULL
), load AS (
    SELECT w.source_id, w.line, b.running_req, b.token_usage,
           (w.window_end_us - b.ts_us) / 1000.0 AS load_lag_ms
    FROM win w ASOF LEFT JOIN decode_batches b
      ON b.run = w.evidence_run AND b.host = w.decode_host
     AND b.ts_us <= w.window_end_us + w.slack_us
), peak AS (
    SELECT w.source_id, w.line, max(b.running_req) AS max_running_req
    FROM win w JOIN decode_batches b
      ON b.run = w.evidence_run AND b.host = w.decode_host
     AND b.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
    GROUP BY ALL
), peers AS (
    -- a snapshot's list read only where it is JSON (the pattern cuts it out as text)
    SELECT w.source_id, w.line, count(*) AS status_samples,
           max(len(s.running)) - 1 AS status_peers
    FROM win w JOIN (
        SELECT run, host, ts_us, CASE WHEN json_valid(running_rids)
               THEN from_json(running_rids, '["VARCHAR"]') END AS running
        FROM scheduler_status
    ) s ON s.run = w.evidence_run AND s.host = w.decode_host
       AND s.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
    WHERE list_contains(s.running, w.rid)
    GROUP BY ALL
), rdma AS (
    SELECT run, host, ts_us, host || ':' || regexp_replace(peer,
               '^local_nic: (\S+?), peer_nic: ([^:@,\s]+)(?::\d+)?@(\S+)$', '\1 → \2@\3') AS pair
    FROM events WHERE kind IN ('slice_failed', 'rnic_inactive', 'rnic_error')
      AND peer IS NOT NULL
), nic AS (
    -- two equi-joins (decode host, prefill host), not an OR
    -- the most named pair, ties to the first in text order (mode's tie is arbitrary)
    SELECT source_id, line, first(pair ORDER BY n DESC, pair) AS nic_pair FROM (
        SELECT source_id, line, pair, count(*) AS n FROM (
            SELECT w.source_id, w.line, r.pair FROM win w JOIN rdma r
              ON r.run = w.evidence_run AND r.host = w.decode_host
             AND r.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
            UNION ALL
            SELECT w.source_id, w.line, r.pair FROM win w JOIN rdma r
              ON r.run = w.evidence_run AND r.host = w.prefill_host
             AND r.ts_us BETWEEN w.window_start_us - w.slack_us AND w.window_end_us + w.slack_us
        ) GROUP BY ALL
    ) GROUP BY ALL
), arrived AS (
    SELECT run, room, host, max(ts_us) AS arrived_us FROM checksums
    WHERE side = 'dst' GROUP BY ALL
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
       CASE WHEN ar.arrived_us IS NOT NULL THEN 'transfer' ELSE w.clock END AS anchor,
       coalesce(ar.arrived_us, w.window_start_us) AS anchor_us,
       CASE WHEN ar.arrived_us IS NOT NULL THEN 'transfer'
            WHEN w.clock <> 'decode' THEN NULL
            WHEN w.d.transfer_ms IS NOT NULL THEN 'time_stats'
            WHEN rq.first_step_us IS NOT NULL THEN 'first_step' END AS transfer_end,
       CASE WHEN ar.arrived_us IS NOT NULL THEN ar.arrived_us
            WHEN w.clock <> 'decode' THEN NULL
            WHEN w.d.transfer_ms IS NOT NULL
            THEN w.receive_us + round(1000 * (coalesce(w.d.prealloc_queue_ms, 0)
                                              + w.d.transfer_ms))::BIGINT
            ELSE rq.first_step_us END AS transfer_end_us,
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
       coalesce(o.own_abort, false) AS own_abort,
       coalesce(o.own_kv_expired, false) AS own_kv_expired,
       coalesce(c.other_transfer_failures, 0) AS other_transfer_failures,
       coalesce(c.other_aborts, 0) AS other_aborts,
       coalesce(c.retractions, 0)::BIGINT AS retractions,
       coalesce(c.lost_connections, 0) AS lost_connections,
       coalesce(c.errors, 0) AS errors, coalesce(c.transfer_layer, 0) AS transfer_layer,
       ld.running_req, ld.token_usage, ld.load_lag_ms, pk.max_running_req,
       CASE WHEN cap.sizes IS NULL OR ld.running_req IS NULL THEN NULL
            ELSE list_contains(cap.sizes, ld.running_req) END AS bs_captured,
       coalesce(ps.status_samples, 0) AS status_samples, ps.status_peers,
       coalesce(nc.nic_pair, CASE WHEN w.decode_host IS NOT NULL THEN '(none)' END) AS nic_pair,
       w.source_id, w.line
FROM win w
LEFT JOIN counted c USING (source_id, line)
LEFT JOIN own o USING (source_id, line)
LEFT JOIN load ld USING (source_id, line)
LEFT JOIN peak pk USING (source_id, line)
LEFT JOIN peers ps USING (source_id, line)
LEFT JOIN nic nc USING (source_id, line)
LEFT JOIN arrived ar ON ar.run = w.evidence_run AND ar.room = w.linked_room
                    AND ar.host = w.decode_host
LEFT JOIN meta m ON m.run = w.evidence_run AND m.rid = w.rid
LEFT JOIN requests rq ON rq.source_id = w.source_id AND rq.line = w.line
LEFT JOIN captured cap ON cap.run = w.evidence_run AND cap.host IS NOT DISTINCT FROM w.decode_host
