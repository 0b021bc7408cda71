-- The engine's instantaneous quantities over one window (maxima of the continuous samples) and
-- its failed scrapes. A failed scrape carries no model, so it counts under any --model.
SELECT
{{- if .}}
    {{template "window_key.sql" "ts"}}  AS k,
{{- end}}
    count()                                     AS samples,
    countIf(NOT up)                             AS samples_down,
    uniqExact(engine)                           AS engines,
    maxOrNull(num_requests_running)             AS running_max,
    maxOrNull(num_requests_waiting)             AS waiting_max,
    maxOrNull(kv_cache_usage_perc)              AS kv_max,
    minIf(ts, NOT up)                           AS first_down,
    anyIf(engine, NOT up)                       AS down_engine
FROM engine_samples FINAL
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND ({model:String} = '' OR model = {model:String} OR NOT up)
{{- if .}}
GROUP BY k
{{- end}}
