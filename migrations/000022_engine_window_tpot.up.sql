-- engine_window_averages(from, to): tpot_s is vLLM's per-request TPOT averaged over the requests
-- that have one, itl_s the token-weighted inter-token latency.
--
-- vllm:request_time_per_output_token_seconds (vLLM PR #24015, absent before it: NULL here) observes
-- each finished request's decode time / (output tokens - 1), and 0 for a request of at most one
-- token (vllm/v1/metrics/stats.py, mean_time_per_output_token). Those zeros pulled the window's
-- mean down where the gateway and the spans have no TPOT at all. They are left out now: the
-- histogram's count less the increase of vllm:request_generation_tokens' le = 1 bucket, which the
-- same finished requests fill in the same loop (vllm/v1/metrics/loggers.py
-- PrometheusStatLogger.record). itl_s (vllm:inter_token_latency_seconds, time_per_output_token_seconds
-- before 0.11) is one observation per interval between two tokens: a long answer weighs as many
-- times as its tokens, so it is not TPOT and is never read as it.

CREATE OR REPLACE VIEW engine_window_averages AS
SELECT
    if(h.engine != '', h.engine, g.engine) AS engine,
    {from:DateTime64(6, 'UTC')} AS window_start,
    {to:DateTime64(6, 'UTC')} AS window_end,
    h.requests AS requests,
    h.queue_s AS queue_s,
    h.prefill_s AS prefill_s,
    h.ttft_s AS ttft_s,
    h.itl_s AS itl_s,
    h.tpot_s AS tpot_s,
    h.decode_s AS decode_s,
    h.inference_s AS inference_s,
    h.e2e_s AS e2e_s,
    h.prompt_tokens AS prompt_tokens,
    h.generation_tokens AS generation_tokens,
    h.resets AS restarts,
    g.max_running AS max_running,
    g.max_waiting AS max_waiting,
    g.max_kv_cache_usage_perc AS max_kv_cache_usage_perc,
    g.samples AS samples,
    g.failed_scrapes AS failed_scrapes
FROM
(
    SELECT
        engine,
        anyIf(toNullable(count_increase), metric = 'e2e_request_latency_seconds') AS requests,
        anyIf(average, metric = 'request_queue_time_seconds') AS queue_s,
        anyIf(average, metric = 'request_prefill_time_seconds') AS prefill_s,
        anyIf(average, metric = 'time_to_first_token_seconds') AS ttft_s,
        anyIf(average, metric = 'inter_token_latency_seconds') AS itl_s,
        -- vLLM observes a per-request TPOT of 0 for a request of at most one output token
        -- (vllm/v1/metrics/stats.py): left out, counted by request_generation_tokens' le = 1.
        anyIf(toNullable(sum_increase), metric = 'request_time_per_output_token_seconds')
            / nullIf(anyIf(toNullable(count_increase), metric = 'request_time_per_output_token_seconds')
                     - coalesce(anyIf(toNullable(le1_increase), metric = 'request_generation_tokens'), 0), 0) AS tpot_s,
        anyIf(average, metric = 'request_decode_time_seconds') AS decode_s,
        anyIf(average, metric = 'request_inference_time_seconds') AS inference_s,
        anyIf(average, metric = 'e2e_request_latency_seconds') AS e2e_s,
        anyIf(average, metric = 'request_prompt_tokens') AS prompt_tokens,
        anyIf(average, metric = 'request_generation_tokens') AS generation_tokens,
        max(resets) AS resets
    FROM
    (
        SELECT
            engine,
            metric,
            arraySort(p -> p.1, groupArray((ts, histogram_sum[metric], histogram_count[metric], gauges['process_start_time_seconds'],
                                            arrayFirst(b -> b.le = 1, histogram_buckets[metric]).count))) AS all_points,
            arraySlice(all_points, greatest(arrayLastIndex(p -> p.1 <= {from:DateTime64(6, 'UTC')}, all_points), 1)) AS pts,
            range(2, length(pts) + 1) AS idx,
            arrayMap(i -> (pts[i].3 < pts[i - 1].3) OR (pts[i].4 != pts[i - 1].4), idx) AS reset_at,
            arraySum(arrayMap((i, r) -> if(r, pts[i].3, pts[i].3 - pts[i - 1].3), idx, reset_at)) AS count_increase,
            arraySum(arrayMap((i, r) -> if(r, pts[i].2, pts[i].2 - pts[i - 1].2), idx, reset_at)) AS sum_increase,
            arraySum(arrayMap((i, r) -> if(r, pts[i].5, pts[i].5 - pts[i - 1].5), idx, reset_at)) AS le1_increase,
            arrayCount(r -> r, reset_at) AS resets,
            if(count_increase > 0, sum_increase / count_increase, NULL) AS average
        FROM engine_samples
        ARRAY JOIN mapKeys(histogram_count) AS metric
        WHERE up
          AND ts > {from:DateTime64(6, 'UTC')} - INTERVAL 10 MINUTE
          AND ts <= {to:DateTime64(6, 'UTC')}
        GROUP BY engine, metric
    )
    GROUP BY engine
) AS h
FULL OUTER JOIN
(
    SELECT
        engine,
        max(num_requests_running) AS max_running,
        max(num_requests_waiting) AS max_waiting,
        max(kv_cache_usage_perc) AS max_kv_cache_usage_perc,
        uniqExactIf(event_id, up) AS samples,
        uniqExactIf(event_id, NOT up) AS failed_scrapes
    FROM engine_samples
    WHERE ts >= {from:DateTime64(6, 'UTC')}
      AND ts <= {to:DateTime64(6, 'UTC')}
    GROUP BY engine
) AS g ON g.engine = h.engine;
