-- skew: per run and pair of hosts (prefill, decode), the bounds on how far decode's clock
-- runs ahead of prefill's that the rooms imply, in µs.
--
-- Causality gives the bounds; no clock is trusted. Decode cannot receive a buffer before
-- prefill sent it: for every room with both records, offset < dst_ts − src_ts, so the
-- smallest such difference is an upper bound. Prefill sends only after decode took the
-- request (SGLang's decode pre-allocates and tells prefill where to write): where decode
-- logged the room's `Receive:` line, offset > receive_ts − src_ts, so the largest is a
-- lower bound. offset = decode clock − prefill clock; negative means decode is behind.
-- A host whose times are all whole seconds (SGLang's prefix without SGLANG_LOG_MS=1) logs
-- each time up to a second early: the upper bound is widened by decode's resolution and
-- the lower by prefill's, so that truncated times never make the bounds contradict.
--
-- @depends rooms
--
-- @column run          VARCHAR  the run
-- @column src_host     VARCHAR  prefill host (sent the buffer)
-- @column dst_host     VARCHAR  decode host (received it)
-- @column upper_us     BIGINT   offset is below this: min(dst_ts − src_ts) + decode's resolution; NULL: no room with both sides
-- @column upper_rooms  BIGINT   rooms with both a src and a dst record
-- @column upper_room   UBIGINT  the room that gives the upper bound (the lowest if several)
-- @column lower_us     BIGINT   offset is above this: max(decode Receive − src_ts) − prefill's resolution; NULL: no Receive on decode
-- @column lower_rooms  BIGINT   rooms with a decode-side Receive line and a src record
-- @column lower_room   UBIGINT  the room that gives the lower bound (the lowest if several)
-- @column resolution_us BIGINT  the coarser of the two hosts' time resolutions, µs (0: sub-second times)
WITH resolution AS (
    SELECT run, host,
           CASE WHEN bool_and(ts_us % 1000000 = 0) THEN 1000000 ELSE 0 END::BIGINT AS res_us
    FROM (SELECT run, host, ts_us FROM checksums UNION ALL
          SELECT run, host, ts_us FROM rid_rooms WHERE event = 'Receive')
    WHERE ts_us IS NOT NULL
    GROUP BY ALL
), pairs AS (
    SELECT run, room, src_host, dst_host, src_ts_us, dst_ts_us
    FROM rooms
    WHERE src_ts_us IS NOT NULL AND dst_ts_us IS NOT NULL
), upper AS (
    SELECT run, src_host, dst_host, min(dst_ts_us - src_ts_us) AS upper_us,
           count(DISTINCT room) AS upper_rooms, arg_min(room, (dst_ts_us - src_ts_us, room)) AS upper_room
    FROM pairs GROUP BY ALL
), received AS (
    SELECT run, host, room, min(ts_us) AS ts_us
    FROM rid_rooms WHERE event = 'Receive' AND room IS NOT NULL AND ts_us IS NOT NULL
    GROUP BY ALL
), lower AS (
    SELECT p.run, p.src_host, p.dst_host, max(r.ts_us - p.src_ts_us) AS lower_us,
           count(DISTINCT p.room) AS lower_rooms, arg_max(p.room, (r.ts_us - p.src_ts_us, -p.room::HUGEINT)) AS lower_room
    FROM pairs p
    JOIN received r ON r.run = p.run AND r.room = p.room AND r.host = p.dst_host
    GROUP BY ALL
)
SELECT u.run, u.src_host, u.dst_host, u.upper_us + coalesce(rd.res_us, 0) AS upper_us,
       u.upper_rooms, u.upper_room, l.lower_us - coalesce(rs.res_us, 0) AS lower_us,
       coalesce(l.lower_rooms, 0) AS lower_rooms, l.lower_room,
       greatest(coalesce(rs.res_us, 0), coalesce(rd.res_us, 0)) AS resolution_us
FROM upper u
LEFT JOIN lower l
  ON l.run = u.run AND l.src_host IS NOT DISTINCT FROM u.src_host
 AND l.dst_host IS NOT DISTINCT FROM u.dst_host
LEFT JOIN resolution rs ON rs.run = u.run AND rs.host IS NOT DISTINCT FROM u.src_host
LEFT JOIN resolution rd ON rd.run = u.run AND rd.host IS NOT DISTINCT FROM u.dst_host
