-- line_values: one row per value a line names (the `named` map of `lines`, long): which
-- peer, NIC, agent, request or count a line states, queryable by name across templates.
--
-- `value` is the text as the line writes it, unit included (`1.95 ms`, `71.4%`,
-- `2480us`); `number` is its number in the base unit of `unit`: seconds (`s`) for
-- durations, bytes (`B`) for sizes, bytes a second (`B/s`) for rates, a fraction for
-- percentages (`71.4%` is 0.714), the number itself for a plain count (`unit` NULL). A
-- unit the line states in the name (`Timeout(ms)=600000` names `timeout_ms`) stays in
-- the name and the number is as written. Rows are not sorted.
--
-- @virtual
-- @column run        VARCHAR   the run the line was ingested under
-- @column host       VARCHAR   the host that logged it
-- @column ts_us      BIGINT    its time, µs since the epoch (the host's clock)
-- @column source_id  INTEGER   the input it came from
-- @column entry_no   BIGINT    its entry in that input
-- @column template   UBIGINT   its template's id (`templates`)
-- @column name       VARCHAR   the value's name, as the namer gives it (`peer`, `nic`, `total_tokens`)
-- @column value      VARCHAR   the value as written
-- @column number     DOUBLE    the value as a number in `unit` (NULL: not a number)
-- @column unit       VARCHAR   s, B, B/s, fraction, tokens/s, or NULL (a plain number, or none)
WITH pairs AS (
    SELECT run, host, ts_us, source_id, entry_no, template,
           unnest(map_entries(named)) AS kv
    FROM lines WHERE named IS NOT NULL
), parsed AS (
    SELECT run, host, ts_us, source_id, entry_no, template, kv.key AS name, kv.value AS value,
           regexp_extract(kv.value, '^(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?) ?([A-Za-zµ%/]*)$',
                          ['n', 'u']) AS m
    FROM pairs
), units(u, factor, base) AS (
    VALUES ('', 1.0, NULL), ('us', 1e-6, 's'), ('µs', 1e-6, 's'), ('microseconds', 1e-6, 's'),
           ('ms', 1e-3, 's'), ('milliseconds', 1e-3, 's'), ('s', 1.0, 's'), ('sec', 1.0, 's'),
           ('secs', 1.0, 's'), ('seconds', 1.0, 's'), ('min', 60.0, 's'), ('minutes', 60.0, 's'),
           ('h', 3600.0, 's'), ('hours', 3600.0, 's'),
           ('B', 1.0, 'B'), ('bytes', 1.0, 'B'), ('KB', 1e3, 'B'), ('kb', 1e3, 'B'),
           ('KiB', 1024.0, 'B'), ('MB', 1e6, 'B'), ('mb', 1e6, 'B'), ('MiB', 1048576.0, 'B'),
           ('GB', 1e9, 'B'), ('gb', 1e9, 'B'), ('GiB', 1073741824.0, 'B'), ('TB', 1e12, 'B'),
           ('KB/s', 1e3, 'B/s'), ('MB/s', 1e6, 'B/s'), ('GB/s', 1e9, 'B/s'),
           ('%', 0.01, 'fraction'), ('tokens/s', 1.0, 'tokens/s'), ('tok/s', 1.0, 'tokens/s')
)
SELECT p.run, p.host, p.ts_us, p.source_id, p.entry_no, p.template, p.name, p.value,
       TRY_CAST(nullif(p.m.n, '') AS DOUBLE) * u.factor AS number,
       CASE WHEN nullif(p.m.n, '') IS NOT NULL THEN u.base END AS unit
FROM parsed p LEFT JOIN units u ON u.u = p.m.u
