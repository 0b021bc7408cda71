-- The rows requests.sql and hour_fill.sql aggregate: one per request of the range in
-- request_timings_sampled (migrations/000016), with the engine's timings filled in, under the
-- model filter, weighted by w (sample_factor).
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
    t.max_tokens                                                          AS max_tokens,
    t.sample_factor                                                       AS w,
    t.arrival_ts                                                          AS arrival_ts
FROM request_timings_sampled(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'),
                             to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')) AS t
WHERE {model:String} = '' OR t.model = {model:String}
