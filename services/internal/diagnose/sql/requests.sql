-- Per-request quantities of one window from the gateway's records, with the engine's own timings
-- filled from its span when the gateway's copy of vLLM's per-request metrics is absent.
-- Spans are read only around the window (they end at most an hour after their request arrived).
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
        r.prompt_tokens                              AS prompt_tokens,
        r.completion_tokens                          AS completion_tokens,
        r.cached_tokens                              AS cached_tokens,
        coalesce(r.queue_s, s.queue_s)               AS queue_s,
        coalesce(r.prefill_s, s.prefill_s)           AS prefill_s,
        coalesce(r.ttft_s, r.scheduled_to_first_token_s, s.ttft_s) AS ttft_s,
        coalesce(r.tpot_s, r.engine_itl_s)           AS tpot_s,
        coalesce(r.decode_s, s.decode_s)             AS decode_s,
        coalesce(r.e2e_s, s.e2e_s)                   AS e2e_s,
        r.finish_reason                              AS finish_reason,
        r.max_tokens                                 AS max_tokens
    FROM requests AS r FINAL
    LEFT JOIN
    (
        SELECT request_id, any(queue_s) AS queue_s, any(prefill_s) AS prefill_s, any(decode_s) AS decode_s,
               any(ttft_s) AS ttft_s, any(e2e_s) AS e2e_s
        FROM engine_spans FINAL
        WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') + INTERVAL 1 HOUR
          AND request_id != ''
        GROUP BY request_id
    ) AS s ON s.request_id = r.request_id
    WHERE r.arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND r.arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR r.model = {model:String})
)
