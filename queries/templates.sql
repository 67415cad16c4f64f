-- templates: one row per template of a run — what every line of it says, masked (see the
-- `lines` table and parsers/templates.py), with how often and where it was logged.
--
-- A template's id is a hash of its text: the same line has the same id in every source,
-- rendering and order, so runs and windows compare by id (`forensics templates
-- --new-since`). Lines a pattern reads have the pattern's name as their text. `text` is
-- NULL where every source held past its cap on stored texts. Rows are not sorted.
--
-- @column run        VARCHAR   the run the lines were ingested under
-- @column template   UBIGINT   the template's id
-- @column text       VARCHAR   the template (or the pattern's name)
-- @column pattern    VARCHAR   the pattern that reads its lines (NULL: none does)
-- @column level      VARCHAR   the level its lines state most often (NULL: none)
-- @column component  VARCHAR   the part of the stack its lines come from, most often
-- @column lines      BIGINT    how many lines
-- @column hosts      MAP(VARCHAR, BIGINT)  lines per host
-- @column first_us   BIGINT    its first line, µs since the epoch (each host's clock)
-- @column last_us    BIGINT    its last line, µs
WITH per_host AS (
    SELECT run, template, coalesce(host, '') AS host, count(*) AS n,
           min(ts_us) AS first_us, max(ts_us) AS last_us,
           any_value(text) AS text, any_value(pattern) AS pattern,
           mode(level) AS level, mode(component) AS component
    FROM lines
    GROUP BY ALL
)
SELECT run, template, any_value(text) AS text, any_value(pattern) AS pattern,
       mode(level) AS level, mode(component) AS component,
       sum(n)::BIGINT AS lines, map_from_entries(list((host, n) ORDER BY host)) AS hosts,
       min(first_us) AS first_us, max(last_us) AS last_us
FROM per_host
GROUP BY run, template
