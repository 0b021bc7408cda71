-- Row counts by hour (without FINAL: any insert moves them) of the tables an hour of
-- diagnose_hourly is computed from, over [from, to): the hours' fingerprints (hourly.go).
SELECT 'requests' AS source, toStartOfHour(arrival_ts) AS hour, count() AS n
FROM requests
WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
GROUP BY hour
UNION ALL
SELECT 'engine_spans' AS source, toStartOfHour(ts) AS hour, count() AS n
FROM engine_spans
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
GROUP BY hour
UNION ALL
SELECT 'app_records' AS source, toStartOfHour(ts) AS hour, count() AS n
FROM app_records
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
GROUP BY hour
