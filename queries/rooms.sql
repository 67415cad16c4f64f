-- rooms: one row per transfer of KV / index-K bytes for one request, as both sides saw it.
--
-- One row is one (run, room, buf, layer, tp): the checksum records prefill wrote when it
-- sent the buffer (side=src) against those decode wrote when it received it (side=dst).
-- Identical duplicate records on one side are counted, not judged; duplicates that
-- disagree make the row a `conflict`. A room without checksum records that SGLang's own KV
-- checksum failed (--disaggregation-enable-kv-checksum: a `transfers` row of the pattern
-- kv_checksum_mismatch) is a row of its own: verdict `mismatch`, source `sglang`, buf kv,
-- layer all.
-- Rows are not sorted.
--
-- Verdicts, first that applies:
--   missing_dst  prefill sent, decode logged nothing
--   missing_src  decode received, prefill logged nothing
--   conflict     duplicates on one side disagree
--   incomparable the sides' digests come from different algorithms (`alg`: probe versions)
--   match        every digest present on both sides is equal (and nbytes where both give it)
--   stale        decode's digests equal what prefill sent for a different room of the run
--   partial      head equal, tail or full differ: the write had not fully landed
--   mismatch     any other difference (also: no digest in common, nothing proves equality)
--
-- @column run          VARCHAR  the run the records were ingested under
-- @column room         UBIGINT  SGLang's bootstrap_room
-- @column buf          VARCHAR  buffer (index_k, kv, …)
-- @column layer        VARCHAR  layer, or 'all'
-- @column tp           BIGINT   tensor-parallel rank
-- @column rid          VARCHAR  request id, from either side
-- @column src_count    BIGINT   src records (identical duplicates included)
-- @column dst_count    BIGINT   dst records (identical duplicates included)
-- @column src_ts_us    BIGINT   first src record, µs since the epoch (prefill's clock)
-- @column dst_ts_us    BIGINT   first dst record, µs since the epoch (decode's clock)
-- @column src_host     VARCHAR  host of the first src record
-- @column dst_host     VARCHAR  host of the first dst record
-- @column verdict      VARCHAR  see above
-- @column stale_of     UBIGINT  for stale: the room whose bytes decode received (lowest if several)
-- @column transfer_events  BIGINT   SGLang transfer events for the room (failures, timeouts, corruption)
-- @column transfer_reasons VARCHAR  those events: "pattern: reason", distinct, joined by " | "
-- @column source       VARCHAR  who judged it: probes (checksum records) or sglang (its own KV checksum)
WITH sides AS (
    SELECT run, room, buf, layer, tp, side,
           count(*) AS n,
           count(DISTINCT (head, tail, "full", nbytes, coalesce(alg, 1))) AS distinct_digests,
           min(ts_us) AS ts_us,
           arg_min(host, ts_us) AS host,
           any_value(rid) AS rid,
           any_value(head) AS head, any_value(tail) AS tail,
           any_value("full") AS "full", any_value(nbytes) AS nbytes,
           any_value(coalesce(alg, 1)) AS alg
    FROM checksums
    GROUP BY ALL
), paired AS (
    SELECT coalesce(s.run, d.run) AS run, coalesce(s.room, d.room) AS room,
           coalesce(s.buf, d.buf) AS buf, coalesce(s.layer, d.layer) AS layer,
           coalesce(s.tp, d.tp) AS tp, coalesce(s.rid, d.rid) AS rid,
           coalesce(s.n, 0) AS src_count, coalesce(d.n, 0) AS dst_count,
           s.ts_us AS src_ts_us, d.ts_us AS dst_ts_us, s.host AS src_host, d.host AS dst_host,
           greatest(coalesce(s.distinct_digests, 0), coalesce(d.distinct_digests, 0)) > 1 AS conflicting,
           s.head AS s_head, s.tail AS s_tail, s."full" AS s_full, s.nbytes AS s_nbytes,
           d.head AS d_head, d.tail AS d_tail, d."full" AS d_full, d.nbytes AS d_nbytes,
           s.alg <> d.alg AS other_alg
    FROM (SELECT * FROM sides WHERE side = 'src') s
    FULL OUTER JOIN (SELECT * FROM sides WHERE side = 'dst') d
      ON s.run = d.run AND s.room = d.room AND s.buf = d.buf
     AND s.layer IS NOT DISTINCT FROM d.layer AND s.tp IS NOT DISTINCT FROM d.tp
), judged AS (
    SELECT *,
           (s_head IS NOT NULL AND d_head IS NOT NULL)
             OR (s_tail IS NOT NULL AND d_tail IS NOT NULL)
             OR (s_full IS NOT NULL AND d_full IS NOT NULL) AS comparable,
           coalesce(s_head = d_head, true) AND coalesce(s_tail = d_tail, true)
             AND coalesce(s_full = d_full, true) AND coalesce(s_nbytes = d_nbytes, true)
             AS agree
    FROM paired
), stale AS (
    -- dst digests equal to the src digests another room of the same run sent
    SELECT j.run, j.room, j.buf, j.layer, j.tp, min(o.room) AS stale_of
    FROM judged j
    JOIN sides o
      ON o.side = 'src' AND o.run = j.run AND o.room <> j.room
     AND o.head IS NOT DISTINCT FROM j.d_head AND o.tail IS NOT DISTINCT FROM j.d_tail
     AND o."full" IS NOT DISTINCT FROM j.d_full
    WHERE j.dst_count > 0 AND NOT (j.comparable AND j.agree)
    GROUP BY ALL
), tx AS (
    SELECT run, room, count(*) AS n, max(rid) AS rid,
           string_agg(DISTINCT pattern || ': ' || coalesce(reason, ''), ' | ') AS reasons
    FROM transfers WHERE room IS NOT NULL GROUP BY ALL
)
SELECT j.run, j.room, j.buf, j.layer, j.tp, j.rid, j.src_count, j.dst_count,
       j.src_ts_us, j.dst_ts_us, j.src_host, j.dst_host,
       CASE
           WHEN j.dst_count = 0 THEN 'missing_dst'
           WHEN j.src_count = 0 THEN 'missing_src'
           WHEN j.conflicting THEN 'conflict'
           WHEN j.other_alg THEN 'incomparable'
           WHEN j.comparable AND j.agree THEN 'match'
           WHEN st.stale_of IS NOT NULL THEN 'stale'
           WHEN j.s_head = j.d_head
                AND coalesce(j.s_tail <> j.d_tail OR j.s_full <> j.d_full, false) THEN 'partial'
           ELSE 'mismatch'
       END AS verdict,
       CASE WHEN j.dst_count > 0 AND j.src_count > 0 AND NOT j.conflicting AND NOT j.other_alg
                 AND NOT (j.comparable AND j.agree) THEN st.stale_of END AS stale_of,
       coalesce(tx.n, 0) AS transfer_events, tx.reasons AS transfer_reasons,
       'probes' AS source
FROM judged j
LEFT JOIN stale st
  ON st.run = j.run AND st.room = j.room AND st.buf = j.buf
 AND st.layer IS NOT DISTINCT FROM j.layer AND st.tp IS NOT DISTINCT FROM j.tp
LEFT JOIN tx ON tx.run = j.run AND tx.room = j.room
UNION ALL
-- SGLang's own checksum, for rooms the probes said nothing of
SELECT e.run, e.room, 'kv', 'all', NULL, coalesce(max(e.rid), max(tx.rid)), 0, 0, NULL, min(e.ts_us),
       NULL, arg_min(e.host, e.ts_us), 'mismatch', NULL, coalesce(any_value(tx.n), 0),
       any_value(tx.reasons), 'sglang'
FROM transfers e
LEFT JOIN tx ON tx.run = e.run AND tx.room = e.room
WHERE e.pattern = 'kv_checksum_mismatch' AND e.room IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM checksums c WHERE c.run = e.run AND c.room = e.room)
GROUP BY e.run, e.room
