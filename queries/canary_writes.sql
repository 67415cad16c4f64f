-- canary_writes: one row per canary record that saw page writes outside the expected set
-- (a decode step × layer on one host), with who was in that step's batch.
--
-- Pages are KV page indexes as the canary logged them; a canary that logged counts only
-- has `n_unexpected` but no `pages`. The batch comes from the `steps` record of the same
-- run, host and step (NULL when decode logged none). Rows are not sorted.
--
-- @depends result_links
--
-- @column run           VARCHAR    the run
-- @column host          VARCHAR    decode host
-- @column step          BIGINT     decode step (forward count of the CUDA-graph replay)
-- @column layer         BIGINT     layer the canary watched
-- @column ts_us         BIGINT     time of the canary record, µs since the epoch (decode's clock)
-- @column mode          VARCHAR    replay / eager / …, as logged
-- @column bs            BIGINT     batch size, as logged
-- @column n_expected    BIGINT     pages the step was expected to write
-- @column n_changed     BIGINT     pages that changed
-- @column n_unexpected  BIGINT     changed pages outside the expected set
-- @column pages         BIGINT[]   those pages, sorted (NULL when only counts were logged)
-- @column rids          VARCHAR[]  request ids in the step's batch
-- @column rooms         UBIGINT[]  rooms in the step's batch
-- @column corrupted     BIGINT     requests of that batch the harness marked corrupted
WITH hit AS (
    SELECT run, host, step, layer, ts_us, mode, bs, n_expected, n_changed, n_unexpected,
           list_sort(unexpected) AS pages
    FROM canary WHERE n_unexpected > 0
), batch AS (
    -- the batches of those steps only (a semi-join first): splitting every step's batch,
    -- millions of rids, to keep a few was most of this query's time
    SELECT s.run, s.host, s.step,
           flatten(list(list_filter(string_split(coalesce(s.rids, ''), ','), lambda x: x <> '')))
               AS rids,
           flatten(list(list_transform(
               list_filter(string_split(coalesce(s.rooms, ''), ','), lambda x: x <> ''),
               lambda x: x::UBIGINT))) AS rooms
    FROM steps s
    SEMI JOIN (SELECT DISTINCT run, host, step FROM hit) h
      ON h.run = s.run AND h.host IS NOT DISTINCT FROM s.host AND h.step = s.step
    GROUP BY ALL
), bad AS (
    -- corrupted requests of each hit step's batch, by rid or by room (two equi-joins),
    -- whichever run the results were ingested under (result_links)
    SELECT run, host, step, count(DISTINCT rid) AS n
    FROM (SELECT b.run, b.host, b.step, r.rid
          FROM (SELECT run, host, step, unnest(rids) AS rid FROM batch) b
          JOIN result_links r ON r.evidence_run = b.run AND r.rid = b.rid AND r.corrupted
          UNION ALL
          SELECT b.run, b.host, b.step, r.rid
          FROM (SELECT run, host, step, unnest(rooms) AS room FROM batch) b
          JOIN result_links r
            ON r.evidence_run = b.run AND r.linked_room = b.room AND r.corrupted)
    GROUP BY ALL
)
SELECT h.run, h.host, h.step, h.layer, h.ts_us, h.mode, h.bs, h.n_expected, h.n_changed,
       h.n_unexpected, h.pages, b.rids, b.rooms, coalesce(bad.n, 0) AS corrupted
FROM hit h
LEFT JOIN batch b ON b.run = h.run AND b.host IS NOT DISTINCT FROM h.host AND b.step = h.step
LEFT JOIN bad ON bad.run = h.run AND bad.host IS NOT DISTINCT FROM h.host AND bad.step = h.step
