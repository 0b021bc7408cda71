-- Which system served the window: requests per model, prompt, config, index and embedding model
-- version, from the gateway's and the application's records together. A request is counted once
-- by the 64-bit hash of its id (a collision among a window's ids has a chance below 1e-9, and
-- hashing UInt64s costs a third less than hashing the id strings: 220 -> 150 ms on an hour of
-- 150,000 requests). Above the sample's bound the
-- counts are estimates (the sample's count times sample_m): a version is named when the sample
-- holds one of its requests.
WITH
    -- As request_timings_sampled (migrations/000016): above 100,000 requests in the range, the
    -- requests with xxh3(request_id) % sample_m = 0, each standing for sample_m requests, so that
    -- a day's baseline costs what 50-100 k requests cost; below, every request (exact counts).
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT kv.1 AS kind, kv.2 AS value, uniqExact(xxh3(request_id)) * sample_m AS n, any(sample_m) AS sample_factor
FROM
(
    SELECT request_id,
           arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                      ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                      ('config_version', toString(config_version))]) AS kv
    FROM requests FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR model = {model:String})
    UNION ALL
    SELECT request_id,
           arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                      ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                      ('config_version', toString(config_version))]) AS kv
    FROM app_records FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR model = {model:String} OR model = '')
)
WHERE value != ''
GROUP BY kind, value
-- By the sample's count, the same order: ClickHouse 26.7 refused the alias n (an aggregate times a WITH
-- scalar) in ORDER BY ("Unknown expression identifier") in the diagnose tests.
ORDER BY kind, uniqExact(xxh3(request_id)) DESC, value
