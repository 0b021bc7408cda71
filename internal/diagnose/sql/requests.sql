-- Per-request quantities of one window: the gateway's records, one row per request, with the
-- engine's timings filled from engine_requests (the spans of n > 1 and multi-prompt children
-- combined, migrations/000009) where the gateway's copy of vLLM's per-request timing object lacks
-- them. ttft_s is from arrival, by the preference request_facts states (migrations/000009): the
-- gateway's stream TTFT, else the engine span's, else queue_s + scheduled_to_first_token_s from
-- the timing object. This is request_facts_window without the application's columns, which
-- diagnose reads elsewhere. Spans are read up to an hour after the window.
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
        coalesce(r.prompt_tokens, s.prompt_tokens)                            AS prompt_tokens,
        coalesce(r.completion_tokens, s.completion_tokens)                    AS completion_tokens,
        r.cached_tokens                                                       AS cached_tokens,
        coalesce(r.queue_s, s.queue_s)                                        AS queue_s,
        coalesce(r.prefill_s, s.prefill_s)                                    AS prefill_s,
        multiIf(r.ttft_s IS NOT NULL, r.ttft_s,
                s.ttft_s IS NOT NULL, s.ttft_s,
                r.queue_s + r.scheduled_to_first_token_s)                     AS ttft_s,
        coalesce(r.tpot_s, r.engine_itl_s, s.tpot_s)                          AS tpot_s,
        coalesce(r.decode_s, s.decode_s)                                      AS decode_s,
        coalesce(r.e2e_s, s.e2e_s)                                            AS e2e_s,
        r.finish_reason                                                       AS finish_reason,
        r.max_tokens                                                          AS max_tokens
    FROM requests AS r FINAL
    LEFT JOIN engine_requests(from = fromUnixTimestamp64Micro({from_us:Int64}, 'UTC') - INTERVAL 1 MINUTE,
                              to = fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') + INTERVAL 1 HOUR) AS s
        ON s.request_id = r.request_id
    WHERE r.arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND r.arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR r.model = {model:String})
)
