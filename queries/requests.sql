-- requests: one row per request the reproducer harness sent, with the evidence about it.
--
-- The request's room is the harness's own `room` column when it has one, else the room
-- whose checksum records carry the same rid, else the one SGLang's --log-requests
-- `Receive:` / `Finish:` lines give the rid. Its verdict is the worst over that room's
-- rows in `rooms` (conflict, mismatch, stale, partial, missing_dst, missing_src,
-- incomparable, match).
-- `unexpected_steps` counts the decode steps the request was in the batch of (by rid or
-- room, from `steps` records) in which a canary saw writes outside the expected pages,
-- on the same host. Rows are not sorted.
--
-- Evidence comes from the result's own run, or the one other run that recorded its rid
-- (`evidence_run`, see result_links).
--
-- @depends rooms
-- @depends result_links
--
-- @column run               VARCHAR  the run the results were ingested under
-- @column session           VARCHAR  harness session
-- @column round             BIGINT   round within the session
-- @column rid               VARCHAR  request id
-- @column room              UBIGINT  bootstrap_room (harness, else checksums by rid, else Receive/Finish lines)
-- @column verdict           VARCHAR  worst verdict of the room in `rooms`; NULL without checksums
-- @column evidence_run      VARCHAR  the run whose records gave the room and steps (see above)
-- @column status            VARCHAR  the harness's status (ok, corrupted, truncated, http_error, timeout; NULL: not given)
-- @column corrupted         BOOLEAN  the harness marked the response corrupted
-- @column reason            VARCHAR  the harness's reason
-- @column start_us          BIGINT   request start, µs since the epoch
-- @column end_us            BIGINT   request end, µs since the epoch
-- @column steps             BIGINT   decode steps (from `steps` records) the request was in the batch of
-- @column unexpected_steps  BIGINT   of those, steps in which a canary saw unexpected page writes
-- @column first_step        BIGINT   first of those steps (NULL: in no step record)
-- @column last_step         BIGINT   last of those steps
-- @column first_step_us     BIGINT   time of the first of those step records, µs (decode's clock)
-- @column last_step_us      BIGINT   time of the last of those step records, µs (decode's clock)
-- @column source_id         INTEGER  the results file (with `line`, the key of a result)
-- @column line              BIGINT   its line
WITH worst AS (
    SELECT run, room,
           arg_max(verdict, CASE verdict WHEN 'conflict' THEN 7 WHEN 'mismatch' THEN 6
                   WHEN 'stale' THEN 5 WHEN 'partial' THEN 4 WHEN 'missing_dst' THEN 3
                   WHEN 'missing_src' THEN 2 WHEN 'incomparable' THEN 2 ELSE 1 END) AS verdict
    FROM rooms GROUP BY ALL
), bad_steps AS (
    SELECT DISTINCT run, host, step FROM canary WHERE n_unexpected > 0
), members AS (
    -- who was in each decode step's batch, by rid and by room
    SELECT run, host, step, ts_us, unnest(string_split(rids, ',')) AS rid, NULL::UBIGINT AS room
    FROM steps WHERE rids <> ''
    UNION ALL
    -- unnested in a subquery, cast outside it: Spark takes no generator inside a cast
    SELECT run, host, step, ts_us, NULL::VARCHAR AS rid, room_text::UBIGINT AS room
    FROM (SELECT run, host, step, ts_us, unnest(string_split(rooms, ',')) AS room_text
          FROM steps WHERE rooms <> '')
), req_steps AS (
    -- two equi-joins: an OR in the join condition would be a nested loop
    SELECT l.evidence_run AS run, l.rid, l.linked_room, m.host, m.step, m.ts_us
    FROM result_links l JOIN members m ON m.run = l.evidence_run AND m.rid = l.rid
    UNION
    SELECT l.evidence_run AS run, l.rid, l.linked_room, m.host, m.step, m.ts_us
    FROM result_links l JOIN members m ON m.run = l.evidence_run AND m.room = l.linked_room
), per_req AS (
    SELECT rs.run, rs.rid, rs.linked_room, count(*) AS steps,
           count(b.step) AS unexpected_steps, min(rs.step) AS first_step,
           max(rs.step) AS last_step, min(rs.ts_us) AS first_step_us,
           max(rs.ts_us) AS last_step_us
    FROM req_steps rs
    LEFT JOIN bad_steps b
      ON b.run = rs.run AND b.host IS NOT DISTINCT FROM rs.host AND b.step = rs.step
    GROUP BY ALL
)
SELECT l.run, l.session, l.round, l.rid, l.linked_room AS room, w.verdict, l.evidence_run,
       l.status, l.corrupted,
       l.reason, l.start_us, l.end_us, coalesce(pr.steps, 0) AS steps,
       coalesce(pr.unexpected_steps, 0) AS unexpected_steps, pr.first_step, pr.last_step,
       pr.first_step_us, pr.last_step_us, l.source_id, l.line
FROM result_links l
LEFT JOIN worst w ON w.run = l.evidence_run AND w.room = l.linked_room
LEFT JOIN per_req pr
  ON pr.run = l.evidence_run AND pr.rid IS NOT DISTINCT FROM l.rid
 AND pr.linked_room IS NOT DISTINCT FROM l.linked_room
