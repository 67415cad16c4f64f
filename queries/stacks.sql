-- stacks: one row per thread of a py-spy dump SGLang's watchdog wrote into its log
-- (srt/utils/cudacore_pyspy_dump_utils.py, 0.5.23: `logger.error(f"Pyspy dump for PID {pid}
-- ({cmd}):\n{result.stdout}")` — on a watchdog timeout, or before a crash with
-- SGLANG_PYSPY_DUMP_BEFORE_CRASH). The dump is py-spy's own text: `Process N: command`,
-- `Python vX.Y.Z (path)`, then each thread (`Thread 12345 (idle): "MainThread"`, the id in
-- hex in some py-spy versions) with its frames indented below it, innermost first
-- (`wait (threading.py:320)`; with --native, `cudaStreamSynchronize (libcudart.so.12)`).
-- A journal holds each printed line as an entry of its own, a saved log as its own line:
-- the dump is the header's entry (its message may hold the whole text) and the entries
-- after it in its input that are lines of a dump, up to the first that is not. Rows are
-- not sorted.
--
-- @virtual
-- @column run          VARCHAR   the run the dump was ingested under
-- @column host         VARCHAR   the host that logged it
-- @column ts_us        BIGINT    the header's time, µs since the epoch (the host's clock)
-- @column source_id    INTEGER   the input it came from
-- @column entry_no     BIGINT    the header's entry in that input
-- @column pid          BIGINT    the process dumped (the header's PID)
-- @column process      VARCHAR   its command line (py-spy's `Process N:` line)
-- @column thread       VARCHAR   the thread's id as py-spy prints it (decimal or 0x…)
-- @column thread_name  VARCHAR   its name (MainThread, Thread-2, …)
-- @column state        VARCHAR   idle, active, gil, … (py-spy's word; NULL: none printed)
-- @column frames       VARCHAR[] its frames, innermost first, each `function (file:line)`
-- @column depth        BIGINT    how many frames
WITH heads AS (
    SELECT e.source_id, e.entry_no, e.ts_us, e.host, s.run, e.message,
           TRY_CAST(regexp_extract(e.message, 'Pyspy dump for PID (\d+)', 1) AS BIGINT) AS pid
    FROM entries e JOIN sources s USING (source_id)
    WHERE contains(e.message, 'Pyspy dump for PID ')
), after AS (
    -- the entries after each header in its input, each flagged as a dump's line or not
    SELECT h.source_id, h.entry_no AS head, e.entry_no, e.message,
           regexp_matches(e.message, '^(Process \d+: |Python v\d|Thread (0x[0-9A-Fa-f]+|\d+) |\s+\S)')
               AS dumped
    FROM heads h JOIN entries e
      ON e.source_id = h.source_id AND e.entry_no > h.entry_no AND e.entry_no <= h.entry_no + 20000
), ends AS (
    SELECT source_id, head, min(entry_no) FILTER (WHERE NOT dumped) AS stop
    FROM after GROUP BY ALL
), kept AS (
    -- the dump's entries: the header (its lines past the first) and those after it
    SELECT source_id, entry_no AS head, entry_no, message, 2 AS first_line FROM heads
    UNION ALL
    SELECT a.source_id, a.head, a.entry_no, a.message, 1
    FROM after a JOIN ends n USING (source_id, head)
    WHERE a.dumped AND (n.stop IS NULL OR a.entry_no < n.stop)
), texts AS (
    -- a saved log joins a dump's indented lines to the line above: every line apart
    SELECT source_id, head, entry_no, i, parts[i] AS line
    FROM (SELECT *, string_split(message, chr(10)) AS parts FROM kept),
         LATERAL (SELECT unnest(range(first_line, len(parts) + 1)) AS i)
), marked AS (
    SELECT *, regexp_extract(line, '^Thread (0x[0-9A-Fa-f]+|\d+) (?:\((\w+)\))?:? ?"?([^"]*)"?',
                             ['id', 'state', 'name']) AS t,
           sum(CASE WHEN regexp_matches(line, '^Thread (0x[0-9A-Fa-f]+|\d+) ') THEN 1 ELSE 0 END)
               OVER (PARTITION BY source_id, head ORDER BY entry_no, i) AS nth
    FROM texts
), processes AS (
    SELECT source_id, head, any_value(regexp_extract(line, '^Process \d+: (.*)$', 1)) AS process
    FROM texts WHERE regexp_matches(line, '^Process \d+: ') GROUP BY ALL
), threads AS (
    SELECT source_id, head, nth,
           any_value(t.id) FILTER (WHERE t.id <> '') AS thread,
           any_value(t.name) FILTER (WHERE t.id <> '') AS thread_name,
           any_value(nullif(t.state, '')) FILTER (WHERE t.id <> '') AS state,
           list(trim(line) ORDER BY entry_no, i) FILTER (WHERE regexp_matches(line, '^\s+\S'))
               AS frames
    FROM marked WHERE nth > 0 GROUP BY ALL
)
SELECT h.run, h.host, h.ts_us, h.source_id, h.entry_no, h.pid, p.process, t.thread,
       t.thread_name, t.state, coalesce(t.frames, []) AS frames,
       len(coalesce(t.frames, [])) AS depth
FROM threads t JOIN heads h ON h.source_id = t.source_id AND h.entry_no = t.head
LEFT JOIN processes p ON p.source_id = t.source_id AND p.head = t.head
