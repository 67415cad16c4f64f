-- result_links: one row per harness result, with the run its evidence is in and its room.
--
-- The room is the harness's own `room` column when it has one, else the room whose
-- checksum records carry the same rid, else the one SGLang's --log-requests `Receive:` /
-- `Finish:` lines give the rid. Evidence comes from the result's own run; a rid that no
-- record of that run carries is looked up in the one other run that recorded it:
-- `forensics repro` writes each level of a sweep as a run of its own, while the journals
-- that saw them all are ingested once, under one run. Rows are not sorted.
--
-- @column run           VARCHAR  the run the result was ingested under
-- @column source_id     INTEGER  the results file
-- @column line          BIGINT   its line
-- @column session       VARCHAR  harness session
-- @column round         BIGINT   round within the session
-- @column rid           VARCHAR  request id
-- @column room          UBIGINT  the harness's own room column
-- @column corrupted     BOOLEAN  the harness marked the response corrupted
-- @column reason        VARCHAR  the harness's reason
-- @column start_us      BIGINT   request start, µs since the epoch
-- @column end_us        BIGINT   request end, µs since the epoch
-- @column concurrency   BIGINT   requests in flight (the harness's count)
-- @column extra         VARCHAR  the result's other fields (JSON)
-- @column status        VARCHAR  the harness's status
-- @column evidence_run  VARCHAR  the run whose records give its room and steps
-- @column linked_room   UBIGINT  the room: the harness's, else by rid from checksums, else from Receive/Finish lines
WITH rid_room AS (
    SELECT run, rid, min(room) AS room FROM checksums WHERE rid IS NOT NULL GROUP BY ALL
), logged AS (
    SELECT run, rid, min(room) AS room FROM rid_rooms WHERE rid IS NOT NULL GROUP BY ALL
), rid_elsewhere AS (
    -- rids that exactly one run's records carry
    SELECT rid, any_value(run) AS run, min(room) AS room
    FROM (SELECT run, rid, room FROM rid_room UNION ALL SELECT run, rid, room FROM logged)
    GROUP BY rid HAVING count(DISTINCT run) = 1
)
SELECT r.*,
       CASE WHEN r.room IS NULL AND rr.room IS NULL AND lg.room IS NULL
                 AND re.run IS NOT NULL THEN re.run ELSE r.run END AS evidence_run,
       coalesce(r.room, rr.room, lg.room, re.room) AS linked_room
FROM results r
LEFT JOIN rid_room rr ON rr.run = r.run AND rr.rid = r.rid
LEFT JOIN logged lg ON lg.run = r.run AND lg.rid = r.rid
LEFT JOIN rid_elsewhere re ON re.rid = r.rid
