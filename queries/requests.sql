-- requests: one row per request the reproducer harness sent, with the evidence about it.
--
-- The request's room is the harness's own `room` column when it has one, else the room
-- whose checksum records carry the same rid, else the one SGLang's --log-requests
-- `Receive:` / `Finish:` lines give the rid. Its verdict is the worst over that room's
-- rows in `rooms` (conflict, mismatch, stale, partial, missing_dst, missing_src, match).
-- `unexpected_steps` counts the decode steps the request was in the batch of (by rid or
-- room, from `steps` records) in which a canary saw writes outside the expected pages,
-- on the same host. Rows are not sorted.
--
-- @depends rooms
--
-- @column run               VARCHAR  the run the results were ingested under
-- @column session           VARCHAR  harness session
-- @column round             BIGINT   round within the session
-- @column rid               VARCHAR  request id
-- @column room              UBIGINT  bootstrap_room (harness, else checksums by rid, else Receive/Finish lines)
-- @column verdict           VARCHAR  worst verdict of the room in `rooms`; NULL without checksums
-- @column corrupted         BOOLEAN  the harness marked the response corrupted
-- @column reason            VARCHAR  the harness's reason
-- @column start_us          BIGINT   request start, µs since the epoch
-- @column end_us            BIGINT   request end, µs since the epoch
-- @column unexpected_steps  BIGINT   decode steps with unexpected page writes this request was in
WITH rid_room AS (
    SELECT run, rid, min(room) AS room FROM checksums WHERE rid IS NOT NULL GROUP BY ALL
), logged AS (
    SELECT run, rid, min(room) AS room FROM rid_rooms WHERE rid IS NOT NULL GROUP BY ALL
), linked AS (
    SELECT r.*, coalesce(r.room, rr.room, lg.room) AS linked_room
    FROM results r
    LEFT JOIN rid_room rr ON rr.run = r.run AND rr.rid = r.rid
    LEFT JOIN logged lg ON lg.run = r.run AND lg.rid = r.rid
), worst AS (
    SELECT run, room,
           arg_max(verdict, CASE verdict WHEN 'conflict' THEN 7 WHEN 'mismatch' THEN 6
                   WHEN 'stale' THEN 5 WHEN 'partial' THEN 4 WHEN 'missing_dst' THEN 3
                   WHEN 'missing_src' THEN 2 ELSE 1 END) AS verdict
    FROM rooms GROUP BY ALL
), bad_steps AS (
    SELECT DISTINCT run, host, step FROM canary WHERE n_unexpected > 0
), in_bad AS (
    SELECT l.run, l.rid, l.linked_room, count(DISTINCT (s.host, s.step)) AS n
    FROM linked l
    JOIN steps s
      ON s.run = l.run
     AND (list_contains(s.rids, l.rid) OR list_contains(s.rooms, l.linked_room))
    JOIN bad_steps b ON b.run = s.run AND b.host IS NOT DISTINCT FROM s.host AND b.step = s.step
    GROUP BY ALL
)
SELECT l.run, l.session, l.round, l.rid, l.linked_room AS room, w.verdict, l.corrupted,
       l.reason, l.start_us, l.end_us, coalesce(ib.n, 0) AS unexpected_steps
FROM linked l
LEFT JOIN worst w ON w.run = l.run AND w.room = l.linked_room
LEFT JOIN in_bad ib
  ON ib.run = l.run AND ib.rid = l.rid AND ib.linked_room IS NOT DISTINCT FROM l.linked_room
