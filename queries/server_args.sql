-- server_args: one row per server start whose arguments its log holds, every argument
-- parsed: SGLang's `server_args=ServerArgs(model_path='…', tp_size=8, …)` (before 0.5.2x)
-- and `server_args={'model_path': '…', …}` (srt/entrypoints/engine.py 0.5.23:
-- `logger.info(f"server_args={_server_args_for_logging(server_args)}")`, a dict of the
-- resolved arguments), and vLLM's `non-default args: {'model': '…', …}` (its API server's
-- start, 0.9 and later). A value is kept as printed, its quotes
-- removed (`8`, `None`, `fp8_e4m3`, `[1, 2, 4]`); a nested record is its text. The side is
-- SGLang's `disaggregation_mode`, else vLLM's `kv_role` (kv_producer: prefill,
-- kv_consumer: decode), else NULL. Rows are not sorted.
--
-- @column run          VARCHAR   the run the log was ingested under
-- @column host         VARCHAR   the host that logged it
-- @column ts_us        BIGINT    the line's time, µs since the epoch (the host's clock)
-- @column source_id    INTEGER   the input it came from
-- @column entry_no     BIGINT    its entry in that input
-- @column engine       VARCHAR   sglang or vllm
-- @column side         VARCHAR   prefill, decode, or NULL (not disaggregated, or not said)
-- @column args         MAP(VARCHAR, VARCHAR)  every argument the line names, by name
WITH said AS (
    SELECT s.run, e.host, e.ts_us, e.source_id, e.entry_no,
           CASE WHEN contains(e.message, 'server_args=') THEN 'sglang' ELSE 'vllm' END AS engine,
           CASE
               WHEN contains(e.message, 'server_args=ServerArgs(')
                   THEN 'call' ELSE 'dict' END AS shape,
           coalesce(
               nullif(regexp_extract(e.message, 'server_args=ServerArgs\((.*)\)\s*$', 1), ''),
               nullif(regexp_extract(e.message, 'server_args=\{(.*)\}\s*$', 1), ''),
               regexp_extract(e.message, 'non-default args: \{(.*)\}\s*$', 1)) AS body
    FROM entries e JOIN sources s USING (source_id)
    WHERE (contains(e.message, 'server_args=ServerArgs(')
           OR contains(e.message, 'server_args={') OR contains(e.message, 'non-default args: {'))
), pairs AS (
    -- name=value (a call) or 'name': value (a dict); a value: a quoted string, a list, a
    -- flat dict, a call such as KVTransferConfig(…), or anything up to the next comma
    SELECT * EXCLUDE (body, shape),
           CASE WHEN shape = 'call' THEN regexp_extract_all(body,
               '(?:^|, )(\w+)=(''(?:[^''\\]|\\.)*''|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^{}]*\}|\w+\([^()]*\)|[^,()]+)', 1)
           ELSE regexp_extract_all(body,
               '(?:^|, )''(\w+)'': (''(?:[^''\\]|\\.)*''|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^{}]*\}|\w+\([^()]*\)|[^,}]+)', 1)
           END AS names,
           CASE WHEN shape = 'call' THEN regexp_extract_all(body,
               '(?:^|, )(\w+)=(''(?:[^''\\]|\\.)*''|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^{}]*\}|\w+\([^()]*\)|[^,()]+)', 2)
           ELSE regexp_extract_all(body,
               '(?:^|, )''(\w+)'': (''(?:[^''\\]|\\.)*''|"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\{[^{}]*\}|\w+\([^()]*\)|[^,}]+)', 2)
           END AS vals
    FROM said
), parsed AS (
    SELECT * EXCLUDE (names, vals),
           map_from_entries(list_transform(list_zip(names, vals),
               lambda x: struct_pack(k := x[1], v := trim(x[2], '''"')))) AS args
    FROM pairs WHERE len(names) > 0 AND len(names) = len(list_distinct(names))
)
SELECT run, host, ts_us, source_id, entry_no, engine,
       CASE
           WHEN args['disaggregation_mode'] IN ('prefill', 'decode') THEN args['disaggregation_mode']
           WHEN contains(coalesce(args['kv_transfer_config'], ''), 'kv_producer') THEN 'prefill'
           WHEN contains(coalesce(args['kv_transfer_config'], ''), 'kv_consumer') THEN 'decode'
       END AS side,
       args
FROM parsed
