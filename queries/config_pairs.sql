-- config_pairs: per run, each prefill start against each decode start (server_args) on an
-- argument the two sides must agree on — the KV's layout and what reads it — where their
-- values differ (an argument one side does not print is not compared). A prefill and a
-- decode that disagree on the page size, the KV cache's dtype, the parallelism, the
-- attention backend, the model or the speculative algorithm write bytes the other reads as
-- something else (sglang#24226, llm-d#2433, vllm-ascend#16723, vllm-ascend#16177). The
-- arguments compared are this view's `agree` list, one row each. Rows are not sorted.
--
-- @depends server_args
--
-- @column run            VARCHAR  the run
-- @column prefill_host   VARCHAR  the prefill server's host
-- @column decode_host    VARCHAR  the decode server's host
-- @column name           VARCHAR  the argument (as the engine names it)
-- @column prefill_value  VARCHAR  prefill's value, as printed
-- @column decode_value   VARCHAR  decode's value
-- @column prefill_ts_us  BIGINT   when prefill printed it (its start)
-- @column decode_ts_us   BIGINT   when decode printed it
WITH agree(name) AS (
    VALUES ('tp_size'), ('dp_size'), ('pp_size'), ('ep_size'), ('page_size'),
           ('kv_cache_dtype'), ('attention_backend'), ('enable_dp_attention'),
           ('speculative_algorithm'), ('enable_hierarchical_cache'), ('enable_hisparse'),
           ('model_path'), ('disaggregation_transfer_backend'), ('dtype'), ('quantization'),
           ('tensor_parallel_size'), ('pipeline_parallel_size'), ('data_parallel_size'),
           ('block_size'), ('model'), ('enable_expert_parallel')
), latest AS (
    -- a host's last start in the run: the one its requests ran on
    SELECT * FROM server_args WHERE side IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY run, host, side ORDER BY ts_us DESC, entry_no DESC) = 1
)
SELECT p.run, p.host AS prefill_host, d.host AS decode_host, a.name,
       p.args[a.name] AS prefill_value, d.args[a.name] AS decode_value,
       p.ts_us AS prefill_ts_us, d.ts_us AS decode_ts_us
FROM latest p JOIN latest d ON d.run = p.run AND p.side = 'prefill' AND d.side = 'decode'
CROSS JOIN agree a
WHERE p.args[a.name] IS NOT NULL AND d.args[a.name] IS NOT NULL
  AND p.args[a.name] <> d.args[a.name]
