-- failures: one row per failure line on any host and rank — a typed transfer failure, a
-- collective's timeout or failure, an abort, a lost connection or session, a transfer
-- layer's error, a traceback, a CUDA/NCCL/UCX error, a router error, and every line no
-- pattern reads whose level is error or critical or that is an exception's last line
-- (`nixlNotFoundError: NIXL_ERR_NOT_FOUND`). What `report`'s cascades are built
-- from (forensics/analyses/cascades.py: which failure is the first, which are echoes).
-- A line with no time (none of its own and none before it in its source) is left out:
-- `report` counts those entries. Rows are not sorted.
--
-- @virtual
-- @column run          VARCHAR  the run the line was ingested under
-- @column host         VARCHAR  the host that logged it
-- @column ts_us        BIGINT   its time, µs since the epoch (the host's clock)
-- @column source_id    INTEGER  the input it came from
-- @column entry_no     BIGINT   its entry in that input
-- @column tp           BIGINT   the tensor-parallel rank of its prefix (NULL: none)
-- @column dp           BIGINT   the data-parallel rank of its prefix
-- @column kind         VARCHAR  transfer, collective, an event's kind (abort, session_failed, traceback, …), error (a line no pattern reads, at level error or critical) or exception (an exception's last line)
-- @column rid          VARCHAR  the request it names
-- @column room         UBIGINT  the bootstrap_room it names
-- @column peer         VARCHAR  the other side it names (a session, a NIC, an address)
-- @column code         VARCHAR  the transport's code (NIXL_ERR_…), where the line gives one
-- @column reason       VARCHAR  what it says went wrong (the exception's message, the event's detail)
-- @column template     UBIGINT  its template (`templates`)
-- @column began_us     BIGINT   where it is a timeout: when its wait began — its time less the duration it states (`timed out after 300.0s`, a watchdog's `ran for N milliseconds`), else its room's first line (decode's Receive); NULL: not a timeout, or not known
WITH failed AS (
    SELECT t.run, t.host, t.ts_us, t.source_id, t.entry_no, t.tp, t.dp, 'transfer' AS kind,
           t.rid, t.room, t.peer, t.reason_code AS code, t.reason, l.template,
           NULL::BIGINT AS ran_us
    FROM transfers t LEFT JOIN lines l USING (source_id, entry_no)
    UNION ALL
    SELECT c.run, c.host, c.ts_us, c.source_id, c.entry_no, c.tp, c.dp, 'collective', NULL, NULL,
           NULL, NULL, c.state || ' ' || coalesce(c.op, '') || ' seq ' || coalesce(c.seq::VARCHAR, '?'),
           l.template, 1000 * c.ran_ms
    FROM collectives c LEFT JOIN lines l USING (source_id, entry_no)
    WHERE c.state IN ('timeout', 'failed')  -- a Flight Recorder entry is no failure
    UNION ALL
    SELECT e.run, e.host, e.ts_us, e.source_id, e.entry_no, e.tp, e.dp, e.kind, e.rid, e.room,
           e.peer, nullif(regexp_extract(e.detail, '(NIXL_ERR_[A-Z_]+)', 1), ''), e.detail,
           l.template, NULL
    FROM events e LEFT JOIN lines l USING (source_id, entry_no)
    WHERE e.kind IN ('abort', 'oom_abort', 'lost_connection', 'session_failed', 'slice_failed',
                     'bootstrap_error', 'transfer_timeout', 'traceback', 'cuda_error', 'nccl_error',
                     'ucx_error', 'sigquit', 'router_error', 'room_failed', 'aux_mismatch',
                     'index_mismatch', 'rnic_inactive', 'rnic_error')
    UNION ALL
    SELECT run, host, ts_us, source_id, entry_no, tp, dp,
           CASE WHEN level IN ('error', 'critical') THEN 'error' ELSE 'exception' END, NULL, NULL,
           NULL, nullif(regexp_extract(text, '(NIXL_ERR_[A-Z_]+)', 1), ''), text, template, NULL
    FROM lines
    WHERE pattern IS NULL
      AND (level IN ('error', 'critical')
           OR (component = 'traceback' AND regexp_matches(text, '^[\w.<>]+(Error|Exception)(:|$)')))
), waits AS (
    -- how long it waited: a watchdog's `ran for`, else the duration the line states
    SELECT * EXCLUDE (ran_us),
           coalesce(ran_us, round(1e6 * TRY_CAST(nullif(regexp_extract(
               reason, 'timed out after ([0-9.]+) ?s', 1), '') AS DOUBLE))::BIGINT) AS waited_us
    FROM failed
), timeouts AS (
    SELECT *, waited_us IS NULL AND (kind = 'transfer_timeout'
                                     OR contains(coalesce(reason, ''), 'timed out')) AS unstated
    FROM waits
), first_seen AS (
    -- a room's first line, for the timeouts that state no duration: where they began waiting
    SELECT r.run, r.room, min(r.ts_us) AS first_us
    FROM rid_rooms r JOIN (SELECT DISTINCT run, room FROM timeouts WHERE unstated) t
      ON t.run = r.run AND t.room = r.room
    GROUP BY ALL
)
SELECT f.* EXCLUDE (waited_us, unstated),
       CASE WHEN f.waited_us IS NOT NULL THEN f.ts_us - f.waited_us
            WHEN f.unstated THEN fs.first_us END AS began_us
FROM timeouts f
LEFT JOIN first_seen fs ON fs.run = f.run AND fs.room = f.room
WHERE f.ts_us IS NOT NULL  -- a line with no time cannot be placed in a cascade
