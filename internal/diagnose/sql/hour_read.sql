-- The baseline from diagnose_hourly (migrations/000017): the hours [from, to) under one model
-- filter, merged. The latest row of each hour counts (FINAL), empty states merge to NaN.
SELECT
    count()                                                        AS hours,
    sumMap(status_counts)                                          AS status_counts,
    sumMap(sums)                                                   AS sums,
    quantilesTDigestWeightedMerge(0.5, 0.95)(queue_s_q)            AS queue_s_q,
    quantilesTDigestWeightedMerge(0.5, 0.95)(ttft_s_q)             AS ttft_s_q,
    quantilesTDigestWeightedMerge(0.5, 0.95)(tpot_s_q)             AS tpot_s_q,
    quantilesTDigestWeightedMerge(0.5, 0.95)(e2e_s_q)              AS e2e_s_q,
    sum(retrieval_n)                                               AS retrieval_n,
    quantilesTDigestWeightedMerge(0.5, 0.95)(retrieval_top_score_q) AS retrieval_top_score_q,
    sum(script_checked)                                            AS script_checked,
    sum(script_violations)                                         AS script_violations,
    sumMap(versions)                                               AS versions,
    max(sample_factor)                                             AS sample_factor
FROM diagnose_hourly FINAL
WHERE model = {model:String}
  AND hour >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND hour < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
