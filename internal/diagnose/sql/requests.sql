-- Per-request quantities of one window: the gateway's records, one row per request, with the
-- engine's timings filled from engine_requests (the spans of n > 1 and multi-prompt children
-- combined, migrations/000009) where the gateway's copy of vLLM's per-request timing object lacks
-- them, as request_timings_sampled gives them (migrations/000016: request_facts_window without the
-- application's columns, which diagnose reads elsewhere; a view, so that a sharded schema joins
-- each shard's own rows). ttft_s is from arrival, by the preference request_facts states
-- (migrations/000009): the gateway's stream TTFT, else the engine span's, else queue_s +
-- scheduled_to_first_token_s from the timing object. Spans are read up to an hour after the window.
--
-- Bounded cost: above 100,000 requests in the range (a day's baseline from ~1.2 requests a
-- second) the view joins a deterministic sample of 50,000 to 100,000 of them, each row standing
-- for sample_factor requests, so means and shares are weighted by it. Quantiles are of the sample
-- (ClickHouse's reservoir quantile takes no weights): on one server every row of a range has the
-- same weight, and on shards the rows are split by request_id, so each shard's sample is a
-- uniform one of the same population. Below the bound every figure is over every request.
-- sampled is the sample's row count (0: no gateway record, read the spans); the exact request
-- count is status.sql's total, which reads requests alone. Executed with a true dot, the same
-- per window of the range (window_key.sql).
SELECT
{{- if .}}
    {{template "window_key.sql" "arrival_ts"}}                            AS k,
{{- end}}
    count()                                                                   AS sampled,
    avgWeightedOrNull(prompt_tokens, w)                                       AS prompt_tokens_mean,
    avgWeightedOrNull(completion_tokens, w)                                   AS completion_tokens_mean,
    sumIf(cached_tokens * w, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL)
        / nullIf(sumIf(prompt_tokens * w, cached_tokens IS NOT NULL AND prompt_tokens IS NOT NULL), 0)
                                                                              AS cached_share,
    avgWeightedOrNull(queue_s, w)                                             AS queue_mean,
    quantileOrNull(0.95)(queue_s)                                             AS queue_p95,
    avgWeightedOrNull(prefill_s, w)                                           AS prefill_mean,
    avgWeightedOrNull(ttft_s, w)                                              AS ttft_mean,
    quantileOrNull(0.5)(ttft_s)                                               AS ttft_p50,
    quantileOrNull(0.95)(ttft_s)                                              AS ttft_p95,
    avgWeightedOrNull(tpot_s, w)                                              AS tpot_mean,
    quantileOrNull(0.95)(tpot_s)                                              AS tpot_p95,
    avgWeightedOrNull(decode_s, w)                                            AS decode_mean,
    avgWeightedOrNull(e2e_s, w)                                               AS e2e_mean,
    quantileOrNull(0.5)(e2e_s)                                                AS e2e_p50,
    quantileOrNull(0.95)(e2e_s)                                               AS e2e_p95,
    sumIf(w, finish_reason = 'length') / nullIf(sumIf(w, finish_reason != ''), 0) AS length_share,
    avgWeightedOrNull(max_tokens, w)                                          AS max_tokens_mean
FROM ({{template "timing_rows.sql"}})
{{- if .}}
GROUP BY k
{{- end}}
