-- The rows versions.sql and hour_fill.sql count: one per request of the range and version label
-- it carries (kind, value), from the gateway's and the application's records, the request as the
-- 64-bit hash of its id (rid), and m, the sample factor.
WITH
    -- As request_timings_sampled (migrations/000016): above 100,000 requests in the range, the
    -- requests with xxh3(request_id) % sample_m = 0, each standing for sample_m requests, so that
    -- a day's baseline costs what 50-100 k requests cost; below, every request (exact counts).
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
                AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT kv.1 AS kind, kv.2 AS value, xxh3(request_id) AS rid, sample_m AS m
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
WHERE kv.2 != ''
