-- The rows script.sql and hour_fill.sql count: one per checked answer of the range, its
-- violation (the gateway's or the application's check finding letters outside the allowed
-- scripts), m, the sample factor, and ts, the answer's first record (its arrival at the
-- gateway, or the application's record).
WITH
    -- As request_timings_sampled (migrations/000016): above 100,000 requests in the range, the
    -- requests with xxh3(request_id) % sample_m = 0, each standing for sample_m requests, so that
    -- a day's baseline costs what 50-100 k requests cost; below, every request (exact counts).
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT request_id, max(v) AS violation, any(sample_m) AS m, min(at) AS ts
FROM
(
    SELECT request_id, assumeNotNull(output_script_violation) AS v, arrival_ts AS at
    FROM requests FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND output_script_violation IS NOT NULL
      AND ({model:String} = '' OR model = {model:String})
    UNION ALL
    SELECT request_id, assumeNotNull(output_script_violation) AS v, ts AS at
    FROM app_records FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND output_script_violation IS NOT NULL
      AND ({model:String} = '' OR model = {model:String} OR model = '')
)
GROUP BY request_id
