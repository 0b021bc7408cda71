-- Per-request quantities of one window from the engine alone, for deployments where no gateway
-- records requests: engine_requests, one row per request with the children of n > 1 and
-- multi-prompt requests combined (migrations/000009), for the requests that arrived in the
-- window (their spans end up to an hour later). TPOT is vLLM's definition, decode time ÷ (output
-- tokens − 1), per child and averaged over the children. vLLM's V1 spans name no model, so
-- --model keeps the requests whose span names it (V0: the loaded model path) or whose engine
-- served it in the window (the model_name label of its /metrics samples: the served name).
SELECT
    count()                                                                   AS requests,
    avgOrNull(prompt_tokens)                                                  AS prompt_tokens_mean,
    avgOrNull(completion_tokens)                                              AS completion_tokens_mean,
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
    avgOrNull(max_tokens)                                                     AS max_tokens_mean
FROM engine_requests(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC'),
                     to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') + INTERVAL 1 HOUR)
WHERE coalesce(start_ts, ts) >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND coalesce(start_ts, ts) < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND ({model:String} = ''
       OR model = {model:String}
       OR engine IN (SELECT engine FROM engine_samples
                     WHERE model = {model:String}
                       AND ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') - INTERVAL 10 MINUTE
                       AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') + INTERVAL 10 MINUTE))
