-- Requests of one window by HTTP status code (with a true dot: per window of the range, k first).
SELECT {{if .}}{{template "window_key.sql" "arrival_ts"}} AS k, {{end}}status_code, count() AS n
FROM requests FINAL
WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND ({model:String} = '' OR model = {model:String})
GROUP BY {{if .}}k, {{end}}status_code
ORDER BY {{if .}}k, {{end}}status_code
