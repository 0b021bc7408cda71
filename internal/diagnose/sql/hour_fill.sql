-- One hour of the baseline into diagnose_hourly (migrations/000017): the partial aggregates of
-- requests.sql, status.sql, retrieval.sql, script.sql and versions.sql over [from, to) (one whole
-- hour) under one model filter, in mergeable form, from the same rows (the *_rows.sql files and
-- status.sql, included): an hour of up to 100,000 requests is read whole. Means and shares become
-- sums of value × weight and of weight, quantiles weighted t-digest states.
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
    greatest(t.factor, sc.factor, v.factor)
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
        toUInt64(max(w))                                                                   AS factor
    FROM ({{template "timing_rows.sql"}})
) AS t
CROSS JOIN
(
    -- status.sql: requests by status code, whose total is the request count.
    SELECT CAST((groupArray(status_code), groupArray(n)), 'Map(UInt16, UInt64)') AS status_counts
    FROM ({{template "status.sql"}})
) AS st
CROSS JOIN
(
    -- retrieval.sql.
    SELECT count() AS n, quantilesTDigestWeightedState(0.5, 0.95)(assumeNotNull(retrieval_top_score), toUInt64(1)) AS top_q
    FROM ({{template "retrieval_rows.sql"}})
) AS rt
CROSS JOIN
(
    -- script.sql.
    SELECT toUInt64(count() * any(m)) AS checked, toUInt64(countIf(violation) * any(m)) AS violations, toUInt64(any(m)) AS factor
    FROM ({{template "script_rows.sql"}})
) AS sc
CROSS JOIN
(
    -- versions.sql.
    SELECT CAST((groupArray(key), groupArray(n)), 'Map(String, UInt64)') AS versions, toUInt64(any(key_m)) AS factor
    FROM
    (
        SELECT concat(kind, '\t', value) AS key, toUInt64(uniqExact(rid) * any(m)) AS n, any(m) AS key_m
        FROM ({{template "versions_rows.sql"}})
        GROUP BY key
    )
) AS v
