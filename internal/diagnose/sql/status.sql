-- Requests of one window by HTTP status code.
SELECT status_code, count() AS n
FROM requests FINAL
WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND ({model:String} = '' OR model = {model:String})
GROUP BY status_code
ORDER BY status_code
