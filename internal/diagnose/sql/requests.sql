-- Per-request quantities of one window: the gateway's records, one row per request, with the
-- engine's timings filled from engine_requests (the spans of n > 1 and multi-prompt children
-- combined, migrations/000009) where the gateway's copy of vLLM's per-request timing object lacks
-- them, as request_timings_window gives them (migrations/000015: request_facts_window without
-- the application's columns, which diagnose reads elsewhere; a view, so that a sharded schema
-- joins each shard's own rows). ttft_s is from arrival, by the preference request_facts states
-- (migrations/000009): the gateway's stream TTFT, else the engine span's, else queue_s +
-- scheduled_to_first_token_s from the timing object. Spans are read up to an hour after the window.
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
        t.prompt_tokens                                                       AS prompt_tokens,
        t.completion_tokens                                                   AS completion_tokens,
        t.cached_tokens                                                       AS cached_tokens,
        t.queue_s                                                             AS queue_s,
        t.prefill_s                                                           AS prefill_s,
        t.ttft_s                                                              AS ttft_s,
        coalesce(t.tpot_s, t.engine_itl_s, t.engine_tpot_s)                   AS tpot_s,
        t.decode_s                                                            AS decode_s,
        coalesce(t.e2e_s, t.engine_e2e_s)                                     AS e2e_s,
        t.finish_reason                                                       AS finish_reason,
        t.max_tokens                                                          AS max_tokens
    FROM request_timings_window(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'),
                                to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')) AS t
    WHERE {model:String} = '' OR t.model = {model:String}
)
