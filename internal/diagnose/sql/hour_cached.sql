-- The input counts diagnose_hourly's rows of one model filter were computed from, by hour.
SELECT hour, requests_rows, spans_rows, app_rows
FROM diagnose_hourly FINAL
WHERE model = {model:String}
  AND hour >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND hour < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
