-- Per-request quantities of one window from the engine's spans alone, for deployments where no
-- gateway records requests. The span has no stop reason; TPOT is vLLM's definition,
-- decode time ÷ (output tokens − 1).
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
FROM
(
    SELECT prompt_tokens, completion_tokens, queue_s, prefill_s, ttft_s, decode_s, e2e_s, max_tokens,
           if(completion_tokens > 1, decode_s / (completion_tokens - 1), NULL) AS tpot_s
    FROM engine_spans FINAL
    WHERE coalesce(start_ts, ts) >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND coalesce(start_ts, ts) < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') + INTERVAL 1 HOUR
      AND ({model:String} = '' OR model = {model:String})
)
