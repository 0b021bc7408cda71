-- Per-request quantities of one window from request_facts_window: the gateway's records, one row
-- per request, with the engine's timings filled from its spans (children of n > 1 and
-- multi-prompt requests combined, migrations/000009) where the gateway's copy of vLLM's
-- per-request timing object lacks them. ttft_s is from arrival, from the best source the request
-- has (ttft_source). Engine rows are read up to an hour after the window (the view does).
SELECT
    count()                                                                   AS requests,
    avgOrNull(prompt_tokens)                                                  AS prompt_tokens_mean,
    avgOrNull(completion_tokens)                                              AS completion_tokens_mean,
    sumIf(cached_tokens, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL)
        / nullIf(sumIf(prompt_tokens, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL), 0)
                                                                              AS cached_share,
    avgOrNull(queue_s)                                                        AS queue_mean,
    quantileOrNull(0.95)(queue_s)                                             AS queue_p95,
    avgOrNull(prefill_s)                                                      AS prefill_mean,
    avgOrNull(ttft_s)                                                         AS ttft_mean,
    quantileOrNull(0.5)(ttft_s)                                               AS ttft_p50,
    quantileOrNull(0.95)(ttft_s)                                              AS ttft_p95,
    avgOrNull(tpot_s)                                                         AS tpot_mean,
    quantileOrNull(0.95)(tpot_s)                                              AS tpot_p95,
    avgOrNull(decode_s)                                                       AS decode_mean,
    avgOrNull(e2e_s)                                                          AS e2e_mean,
    quantileOrNull(0.5)(e2e_s)                                                AS e2e_p50,
    quantileOrNull(0.95)(e2e_s)                                               AS e2e_p95,
    countIf(finish_reason = 'length') / nullIf(countIf(finish_reason != ''), 0) AS length_share,
    avgOrNull(max_tokens)                                                     AS max_tokens_mean
FROM
(
    SELECT
        prompt_tokens,
        completion_tokens,
        cached_tokens,
        queue_s,
        prefill_s,
        ttft_s,
        coalesce(tpot_s, engine_itl_s, engine_tpot_s)                         AS tpot_s,
        decode_s,
        coalesce(e2e_s, engine_e2e_s)                                         AS e2e_s,
        finish_reason,
        max_tokens
    FROM request_facts_window(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'),
                              to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC'))
    WHERE {model:String} = '' OR model = {model:String}
)
