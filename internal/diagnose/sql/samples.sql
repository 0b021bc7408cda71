-- The engine's instantaneous quantities over one window (maxima of the continuous samples) and
-- its failed scrapes. A failed scrape carries no model, so it counts under any --model. The KV
-- maximum is over the samples with requests running (a sample without the running gauge counts as
-- running), as kv_cache_pressure reads it: a cache full with nothing running is not pressure but
-- kv_cache_stuck's fault (engines.sql), and must not read as both.
SELECT
{{- if .}}
    {{template "window_key.sql" "ts"}}  AS k,
{{- end}}
    count()                                     AS samples,
    countIf(NOT up)                             AS samples_down,
    uniqExact(engine)                           AS engines,
    maxOrNull(num_requests_running)             AS running_max,
    maxOrNull(num_requests_waiting)             AS waiting_max,
    maxOrNullIf(kv_cache_usage_perc, ifNull(num_requests_running, 1) > 0) AS kv_max,
    minIf(ts, NOT up)                           AS first_down,
    anyIf(engine, NOT up)                       AS down_engine
FROM engine_samples FINAL
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND ({model:String} = '' OR model = {model:String} OR NOT up)
{{- if .}}
GROUP BY k
{{- end}}
