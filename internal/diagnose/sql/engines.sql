-- Each engine's health over the window (a data-parallel engine's children, engine#0, engine#1, as
-- the one engine the collector scrapes and whose spans carry its name): its scrapes and the
-- failed ones, its last scrape's state and error, its samples with nothing running and their
-- lowest KV cache usage, its model (from its last successful scrape), its spans in the window and
-- in the baseline, and the gateway's sampled requests for its model in the window.
SELECT e.base, e.model, e.scrapes, e.failed, e.last_up, e.last_ts, e.last_error,
       e.idle_samples, e.idle_kv_min, e.idle_waiting_max,
       ifNull(w.spans, 0), ifNull(b.spans, 0), ifNull(r.requests, 0)
FROM
(
    SELECT splitByChar('#', engine)[1] AS base, argMaxIf(model, ts, up AND model != '') AS model,
           count() AS scrapes, countIf(NOT up) AS failed, argMax(up, ts) AS last_up, max(ts) AS last_ts,
           argMaxIf(scrape_error, ts, NOT up) AS last_error,
           countIf(up AND num_requests_running = 0 AND kv_cache_usage_perc IS NOT NULL) AS idle_samples,
           minIf(kv_cache_usage_perc, up AND num_requests_running = 0) AS idle_kv_min,
           maxIf(num_requests_waiting, up AND num_requests_running = 0) AS idle_waiting_max
    FROM engine_samples FINAL
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
    GROUP BY base
) AS e
LEFT JOIN
(
    SELECT engine, count() AS spans FROM engine_spans
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
    GROUP BY engine
) AS w ON w.engine = e.base
LEFT JOIN
(
    SELECT engine, count() AS spans FROM engine_spans
    WHERE ts >= fromUnixTimestamp64Micro({base_from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({base_to_us:Int64}, 'UTC')
    GROUP BY engine
) AS b ON b.engine = e.base
LEFT JOIN
(
    SELECT model, count() AS requests FROM requests FINAL
    WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND status_code < 400 AND (trace_sampled IS NULL OR trace_sampled)
    GROUP BY model
) AS r ON r.model = e.model
WHERE {model:String} = '' OR e.model = {model:String} OR e.model = ''
ORDER BY e.base
