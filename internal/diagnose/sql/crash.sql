-- The engine's last words in one window: out-of-memory lines and other exceptions in its log.
SELECT
{{- if .}}
    {{template "window_key.sql" "ts"}}  AS k,
{{- end}}
    count()                                                      AS log_lines,
    countIf(oom_bytes_requested IS NOT NULL)                     AS oom_lines,
    countIf(exception_type != '')                                AS exception_lines,
    maxIf(ts, oom_bytes_requested IS NOT NULL OR exception_type != '') AS last_error_ts,
    argMaxIf(engine, ts, oom_bytes_requested IS NOT NULL OR exception_type != '') AS last_error_engine,
    argMaxIf(exception_type, ts, exception_type != '')           AS last_exception,
    argMaxIf(oom_bytes_requested, ts, oom_bytes_requested IS NOT NULL) AS last_oom_bytes
FROM engine_logs FINAL
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
{{- if .}}
GROUP BY k
{{- end}}
