-- One hour of the baseline into diagnose_hourly (migrations/000017): the partial aggregates of
-- requests.sql, status.sql, retrieval.sql, script.sql and versions.sql over [from, to) (one whole
-- hour) under one model filter, in mergeable form. Each part reads what its live query reads,
-- filtered and sampled the same way (request_timings_sampled and the sample_m of script.sql and
-- versions.sql give an hour of up to 100,000 requests exactly). Means and shares become sums of
-- value × weight and of weight, quantiles weighted t-digest states.
INSERT INTO diagnose_hourly (hour, model, requests_rows, spans_rows, app_rows, status_counts, sums, queue_s_q, ttft_s_q,
                             tpot_s_q, e2e_s_q, retrieval_n, retrieval_top_score_q, script_checked,
                             script_violations, versions, sample_factor)
SELECT
    toStartOfHour(fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')),
    {model:String},
    {requests_rows:UInt64},
    {spans_rows:UInt64},
    {app_rows:UInt64},
    st.status_counts,
    t.sums,
    t.queue_s_q,
    t.ttft_s_q,
    t.tpot_s_q,
    t.e2e_s_q,
    rt.n,
    rt.top_q,
    sc.checked,
    sc.violations,
    v.versions,
    greatest(t.m, sc.m, v.m)
FROM
(
    -- requests.sql's per-request rows.
    SELECT
        map('prompt_tokens',       sumIf(ifNull(prompt_tokens, 0) * w, prompt_tokens IS NOT NULL),
            'prompt_tokens.w',     sumIf(w, prompt_tokens IS NOT NULL),
            'completion_tokens',   sumIf(ifNull(completion_tokens, 0) * w, completion_tokens IS NOT NULL),
            'completion_tokens.w', sumIf(w, completion_tokens IS NOT NULL),
            'cached_tokens',       sumIf(ifNull(cached_tokens, 0) * w, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL),
            'cached_tokens.w',     sumIf(ifNull(prompt_tokens, 0) * w, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL),
            'queue_s',             sumIf(ifNull(queue_s, 0) * w, queue_s IS NOT NULL),
            'queue_s.w',           sumIf(w, queue_s IS NOT NULL),
            'prefill_s',           sumIf(ifNull(prefill_s, 0) * w, prefill_s IS NOT NULL),
            'prefill_s.w',         sumIf(w, prefill_s IS NOT NULL),
            'ttft_s',              sumIf(ifNull(ttft_s, 0) * w, ttft_s IS NOT NULL),
            'ttft_s.w',            sumIf(w, ttft_s IS NOT NULL),
            'tpot_s',              sumIf(ifNull(tpot_s, 0) * w, tpot_s IS NOT NULL),
            'tpot_s.w',            sumIf(w, tpot_s IS NOT NULL),
            'decode_s',            sumIf(ifNull(decode_s, 0) * w, decode_s IS NOT NULL),
            'decode_s.w',          sumIf(w, decode_s IS NOT NULL),
            'e2e_s',               sumIf(ifNull(e2e_s, 0) * w, e2e_s IS NOT NULL),
            'e2e_s.w',             sumIf(w, e2e_s IS NOT NULL),
            'length',              sumIf(w, finish_reason = 'length'),
            'length.w',            sumIf(w, finish_reason != ''),
            'max_tokens',          sumIf(ifNull(max_tokens, 0) * w, max_tokens IS NOT NULL),
            'max_tokens.w',        sumIf(w, max_tokens IS NOT NULL))                           AS sums,
        quantilesTDigestWeightedStateIf(0.5, 0.95)(ifNull(queue_s, 0), toUInt64(w), queue_s IS NOT NULL) AS queue_s_q,
        quantilesTDigestWeightedStateIf(0.5, 0.95)(ifNull(ttft_s, 0), toUInt64(w), ttft_s IS NOT NULL)   AS ttft_s_q,
        quantilesTDigestWeightedStateIf(0.5, 0.95)(ifNull(tpot_s, 0), toUInt64(w), tpot_s IS NOT NULL)   AS tpot_s_q,
        quantilesTDigestWeightedStateIf(0.5, 0.95)(ifNull(e2e_s, 0), toUInt64(w), e2e_s IS NOT NULL)     AS e2e_s_q,
        toUInt64(max(w))                                                                   AS m
    FROM
    (
        SELECT
            t.prompt_tokens                                       AS prompt_tokens,
            t.completion_tokens                                   AS completion_tokens,
            t.cached_tokens                                       AS cached_tokens,
            t.queue_s                                             AS queue_s,
            t.prefill_s                                           AS prefill_s,
            t.ttft_s                                              AS ttft_s,
            coalesce(t.tpot_s, t.engine_itl_s, t.engine_tpot_s)   AS tpot_s,
            t.decode_s                                            AS decode_s,
            coalesce(t.e2e_s, t.engine_e2e_s)                     AS e2e_s,
            t.finish_reason                                       AS finish_reason,
            t.max_tokens                                          AS max_tokens,
            t.sample_factor                                       AS w
        FROM request_timings_sampled(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'),
                                     to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')) AS t
        WHERE {model:String} = '' OR t.model = {model:String}
    )
) AS t
CROSS JOIN
(
    -- status.sql, whose total is requests.sql's exact count.
    SELECT CAST((groupArray(status_code), groupArray(n)), 'Map(UInt16, UInt64)') AS status_counts
    FROM
    (
        SELECT status_code, count() AS n
        FROM requests FINAL
        WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND ({model:String} = '' OR model = {model:String})
        GROUP BY status_code
    )
) AS st
CROSS JOIN
(
    -- retrieval.sql.
    SELECT count() AS n, quantilesTDigestWeightedState(0.5, 0.95)(assumeNotNull(retrieval_top_score), toUInt64(1)) AS top_q
    FROM app_records FINAL
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND retrieval_top_score IS NOT NULL
      AND ({model:String} = '' OR model = {model:String} OR model = '')
) AS rt
CROSS JOIN
(
    -- script.sql.
    WITH
        coalesce((SELECT count() FROM requests
                  WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                    AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
        toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
    SELECT toUInt64(count() * sample_m) AS checked, toUInt64(countIf(violation) * sample_m) AS violations, toUInt64(sample_m) AS m
    FROM
    (
        SELECT request_id, max(v) AS violation
        FROM
        (
            SELECT request_id, assumeNotNull(output_script_violation) AS v
            FROM requests FINAL
            PREWHERE xxh3(request_id) % sample_m = 0
            WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
              AND output_script_violation IS NOT NULL
              AND ({model:String} = '' OR model = {model:String})
            UNION ALL
            SELECT request_id, assumeNotNull(output_script_violation) AS v
            FROM app_records FINAL
            PREWHERE xxh3(request_id) % sample_m = 0
            WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
              AND output_script_violation IS NOT NULL
              AND ({model:String} = '' OR model = {model:String} OR model = '')
        )
        GROUP BY request_id
    )
) AS sc
CROSS JOIN
(
    -- versions.sql.
    WITH
        coalesce((SELECT count() FROM requests
                  WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                    AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
        toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
    SELECT CAST((groupArray(key), groupArray(n)), 'Map(String, UInt64)') AS versions, any(sample_m) AS m
    FROM
    (
        SELECT concat(kv.1, '\t', kv.2) AS key, toUInt64(uniqExact(xxh3(request_id)) * sample_m) AS n
        FROM
        (
            SELECT request_id,
                   arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                              ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                              ('config_version', toString(config_version))]) AS kv
            FROM requests FINAL
            PREWHERE xxh3(request_id) % sample_m = 0
            WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
              AND ({model:String} = '' OR model = {model:String})
            UNION ALL
            SELECT request_id,
                   arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                              ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                              ('config_version', toString(config_version))]) AS kv
            FROM app_records FINAL
            PREWHERE xxh3(request_id) % sample_m = 0
            WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
              AND ({model:String} = '' OR model = {model:String} OR model = '')
        )
        WHERE kv.2 != ''
        GROUP BY key
    )
) AS v
