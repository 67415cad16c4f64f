-- fail_open: one row per harness request that got its reply (status ok or corrupted: the
-- server answered 200) although a KV transfer failure names it (its rid or room) or its
-- room's checksum verdict is a bad one — the fail-open path, where a user gets garbage and
-- the transfer-failure counter says nothing. A failure followed by a transfer of the same
-- rid under another room that no failure names (a retry, a stream migration) is
-- `recovered`, not fail-open. Rows are not sorted.
--
-- @depends request_evidence
-- @depends requests
--
-- @column run           VARCHAR  the run the results were ingested under
-- @column source_id     INTEGER  the results file
-- @column line          BIGINT   its line
-- @column rid           VARCHAR  request id
-- @column room          UBIGINT  its bootstrap_room (see result_links)
-- @column status        VARCHAR  the harness's status (ok or corrupted)
-- @column corrupted     BOOLEAN  the harness marked the reply corrupted
-- @column prefill_host  VARCHAR  host that prefilled it
-- @column decode_host   VARCHAR  host that decoded it
-- @column transfer_failed BOOLEAN a transfer failure names it
-- @column mismatch      BOOLEAN  its room's checksum verdict is a bad one (mismatch, stale, partial)
-- @column failed_us     BIGINT   the first failure naming it, µs since the epoch (NULL: a mismatch only)
-- @column recovered     BOOLEAN  the same rid was given another room after its last failure, and no failure names that room
WITH answered AS (
    SELECT e.run, e.source_id, e.line, e.rid, e.room, e.evidence_run, e.status, e.corrupted,
           e.prefill_host, e.decode_host, e.own_transfer_failed AS transfer_failed,
           coalesce(r.verdict IN ('mismatch', 'stale', 'partial'), false) AS mismatch
    FROM request_evidence e JOIN requests r USING (source_id, line)
    WHERE e.status IN ('ok', 'corrupted')
), named AS (
    -- two equi-joins, not an OR (a nested loop), as request_evidence does
    SELECT a.source_id, a.line, t.ts_us, t.room FROM answered a
    JOIN transfers t ON t.run = a.evidence_run AND t.rid = a.rid
    UNION
    SELECT a.source_id, a.line, t.ts_us, t.room FROM answered a
    JOIN transfers t ON t.run = a.evidence_run AND t.room = a.room
), failed AS (
    SELECT source_id, line, min(ts_us) AS failed_us, max(ts_us) AS last_us,
           list(DISTINCT room) FILTER (WHERE room IS NOT NULL) AS rooms
    FROM named GROUP BY ALL
), retried AS (
    SELECT DISTINCT f.source_id, f.line
    FROM failed f JOIN answered a USING (source_id, line)
    JOIN rid_rooms r ON r.run = a.evidence_run AND r.rid = a.rid AND r.ts_us > f.last_us
    WHERE r.room IS NOT NULL AND NOT list_contains(coalesce(f.rooms, []), r.room)
      AND NOT EXISTS (SELECT 1 FROM transfers t
                      WHERE t.run = a.evidence_run AND t.room = r.room)
)
SELECT a.run, a.source_id, a.line, a.rid, a.room, a.status, a.corrupted, a.prefill_host,
       a.decode_host, a.transfer_failed, a.mismatch, f.failed_us,
       (r.source_id IS NOT NULL) AS recovered
FROM answered a
LEFT JOIN failed f USING (source_id, line)
LEFT JOIN retried r USING (source_id, line)
WHERE a.transfer_failed OR a.mismatch
