-- Share of answers with letters outside the allowed scripts, per request: the gateway's check
-- and the application's check are merged, and either one finding a violation counts. Above the
-- sample's bound both counts are estimates (the sample's times sample_m); the share is the sample's.
WITH
    -- As request_timings_sampled (migrations/000016): above 100,000 requests in the range, the
    -- requests with xxh3(request_id) % sample_m = 0, each standing for sample_m requests, so that
    -- a day's baseline costs what 50-100 k requests cost; below, every request (exact counts).
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT count() * sample_m AS checked, countIf(violation) * sample_m AS violations, any(sample_m) AS sample_factor
FROM
(
    SELECT request_id, max(v) AS violation
    FROM
    (
        SELECT request_id, assumeNotNull(output_script_violation) AS v
        FROM requests FINAL
        PREWHERE xxh3(request_id) % sample_m = 0
        WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND output_script_violation IS NOT NULL
          AND ({model:String} = '' OR model = {model:String})
        UNION ALL
        SELECT request_id, assumeNotNull(output_script_violation) AS v
        FROM app_records FINAL
        PREWHERE xxh3(request_id) % sample_m = 0
        WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND output_script_violation IS NOT NULL
          AND ({model:String} = '' OR model = {model:String} OR model = '')
    )
    GROUP BY request_id
)
