-- integrity: one row per integrity record of any source — the probes' room verdicts,
-- SGLang's KV checksum (a mismatch; a skip, which names no request) and its metadata
-- room check (its line, or the abort it answers with), a vLLM connector's KV checksum,
-- vLLM-Ascend's DFX content checks, Mooncake Store's checksum code, and a harness result
-- whose error body says "KV checksum mismatch". Each says `verified`, `mismatch` or
-- `not_verified` for the request or room it names (or, naming none, for its host at its
-- time). `known_false_positive` is set where a documented false positive may apply:
-- SGLang's metadata room check before sgl-project/sglang#27374 (merged 2026-06-05; first
-- in SGLang 0.5.13 — 0.5.12's decode.py lacks the reset, 0.5.13's has it) read a freed
-- slot's stale room and, under TCP transport at 32+ concurrent requests, aborted ~3 % of
-- requests falsely. The note names what the incident's own lines show: the version (the
-- `sglang_version` events: check_env's `sglang: X`, pip's `sglang==X`; the lowest where
-- several), the TCP transport (`tcp_transport`: MC_FORCE_TCP=1, the `mooncake_tcp`
-- backend) and the highest concurrency (the harness's, or decode's #running-req) of the
-- runs with such a mismatch; with all three shown it is a statement, otherwise
-- "possible: …" with what is missing; a version with the fix sets none. Which
-- requests a check verified is `forensics report`'s (forensics/analyses/integrity.py): a
-- check counts as on only where its flag or its passes are in the logs. Rows are not
-- sorted.
--
-- @virtual
-- @depends rooms
--
-- @column run                  VARCHAR  the run
-- @column ts_us                BIGINT   when, µs since the epoch (the host's clock; the harness's for its rows)
-- @column host                 VARCHAR  the host that logged it (NULL: the harness)
-- @column checker              VARCHAR  probes, sglang_kv_checksum, sglang_metadata_room, vllm_kv_checksum, vllm_ascend_dfx, mooncake_store, harness
-- @column rid                  VARCHAR  the request it names
-- @column room                 UBIGINT  the bootstrap_room it names
-- @column verdict              VARCHAR  verified, mismatch or not_verified
-- @column reason               VARCHAR  what it says (the mismatch, why not verified, the probes' verdicts)
-- @column known_false_positive VARCHAR  a documented false positive that may apply, and its fix (NULL: none known)
WITH records AS (
    SELECT run, ts_us, host, checker, rid, room, verdict, reason FROM checks
    WHERE verdict <> 'on'
    UNION ALL
    -- the probes: each room's worst verdict over its buffers, layers and ranks
    SELECT run, min(dst_ts_us), arg_min(dst_host, dst_ts_us), 'probes', any_value(rid), room,
           CASE WHEN bool_or(verdict IN ('mismatch', 'stale', 'partial')) THEN 'mismatch'
                WHEN bool_and(verdict = 'match') THEN 'verified' ELSE 'not_verified' END,
           string_agg(DISTINCT verdict, ', ' ORDER BY verdict)
    FROM rooms WHERE source = 'probes'
    GROUP BY run, room
    UNION ALL
    -- the abort the metadata room check answers with (its line may be missing)
    SELECT run, ts_us, host, 'sglang_metadata_room', rid, NULL, 'mismatch', finish_message
    FROM request_meta WHERE finish_message LIKE 'Metadata corruption detected%'
    UNION ALL
    SELECT run, end_us, NULL, 'harness', rid, room, 'mismatch', reason FROM results
    WHERE status = 'http_error'
      AND (contains(coalesce(reason, ''), 'KV checksum mismatch')
           OR contains(coalesce(extra, ''), 'KV checksum mismatch'))
)
-- what the incident's own lines show of the false positive's conditions
, flagged AS (
    -- the runs with a metadata room mismatch: only their facts are read
    SELECT DISTINCT run FROM records
    WHERE checker = 'sglang_metadata_room' AND verdict = 'mismatch'
), shown AS (
    SELECT v.version, v.version_key,
           (SELECT count(*) > 0 FROM events
            WHERE kind = 'tcp_transport' AND run IN (SELECT run FROM flagged)) AS tcp,
           greatest((SELECT max(concurrency) FROM results WHERE run IN (SELECT run FROM flagged)),
                    (SELECT max(running_req) FROM batches
                     WHERE lower(phase) = 'decode' AND run IN (SELECT run FROM flagged)))
               AS concurrency
    FROM (
        -- the lowest version the logs state, and its numbers to compare
        SELECT arg_min(detail, key) AS version, min(key) AS version_key FROM (
            SELECT detail, CAST(string_split(regexp_extract(detail, '^\d+\.\d+\.\d+'), '.')
                                AS INTEGER[]) AS key
            FROM events WHERE kind = 'sglang_version' AND run IN (SELECT run FROM flagged))
    ) v
    WHERE EXISTS (SELECT 1 FROM flagged)
)
, room_note AS (
    SELECT CASE
        WHEN version_key >= [0, 5, 13] THEN NULL
        ELSE CASE WHEN version IS NOT NULL AND tcp AND coalesce(concurrency, 0) >= 32
                  THEN '' ELSE 'possible: ' END
             || 'sgl-project/sglang#27374 — before its fix (merged 2026-06-05, first in '
             || 'SGLang 0.5.13) the room check read a freed slot''s stale room and aborted '
             || '~3 % of requests falsely under TCP transport (MC_FORCE_TCP=1) at 32+ '
             || 'concurrent requests; the logs show '
             || concat_ws(', ',
                    CASE WHEN version IS NOT NULL THEN 'SGLang ' || version END,
                    CASE WHEN tcp THEN 'the TCP transport' END,
                    CASE WHEN concurrency IS NOT NULL
                         THEN concurrency::VARCHAR || ' concurrent requests at most' END)
             || CASE WHEN version IS NULL AND NOT tcp AND concurrency IS NULL THEN 'none of it'
                     ELSE '' END
             || CASE WHEN version IS NULL THEN '; the version is not in the logs' ELSE '' END
             || CASE WHEN NOT tcp THEN '; the transport is not in the logs' ELSE '' END
             || '. Fix: SGLang 0.5.13 or later'
        END AS note
    FROM shown
)
SELECT r.*,
       CASE WHEN r.checker = 'sglang_metadata_room' AND r.verdict = 'mismatch'
            THEN (SELECT note FROM room_note) END AS known_false_positive
FROM records r
