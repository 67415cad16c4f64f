-- canary_writes: one row per canary record that saw page writes outside the expected set
-- (a decode step × layer on one host), with who was in that step's batch.
--
-- Pages are KV page indexes as the canary logged them; a canary that logged counts only
-- has `n_unexpected` but no `pages`. The batch comes from the `steps` record of the same
-- run, host and step (NULL when decode logged none). Rows are not sorted.
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
WITH batch AS (
    SELECT run, host, step, flatten(list(rids)) AS rids, flatten(list(rooms)) AS rooms
    FROM steps GROUP BY ALL
), hit AS (
    SELECT c.run, c.host, c.step, c.layer, c.ts_us, c.mode, c.bs, c.n_expected, c.n_changed,
           c.n_unexpected, list_sort(c.unexpected) AS pages, b.rids, b.rooms
    FROM canary c
    LEFT JOIN batch b ON b.run = c.run AND b.host IS NOT DISTINCT FROM c.host AND b.step = c.step
    WHERE c.n_unexpected > 0
), hit_batch AS (
    SELECT DISTINCT run, host, step, rids, rooms FROM hit
), bad AS (
    -- corrupted requests of each hit step's batch, by rid or by room (two equi-joins)
    SELECT run, host, step, count(DISTINCT rid) AS n
    FROM (SELECT b.run, b.host, b.step, r.rid
          FROM (SELECT run, host, step, unnest(rids) AS rid FROM hit_batch) b
          JOIN results r ON r.run = b.run AND r.rid = b.rid AND r.corrupted
          UNION ALL
          SELECT b.run, b.host, b.step, r.rid
          FROM (SELECT run, host, step, unnest(rooms) AS room FROM hit_batch) b
          JOIN results r ON r.run = b.run AND r.room = b.room AND r.corrupted)
    GROUP BY ALL
)
SELECT h.*, coalesce(bad.n, 0) AS corrupted
FROM hit h
LEFT JOIN bad ON bad.run = h.run AND bad.host IS NOT DISTINCT FROM h.host AND bad.step = h.step
