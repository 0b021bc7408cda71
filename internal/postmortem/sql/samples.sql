-- One engine's /metrics samples over a time range, by engine index: the scrape target named after
-- the engine, and for a data-parallel server each engine core's sample '<engine>#<index>'
-- (services/collector/scrape). The index is the sample's engine_index, else the name's suffix
-- (rows stored before migration 000020).
SELECT if(engine_index != '', engine_index, if(engine = {engine:String}, '', substring(engine, length({engine:String}) + 2))) AS idx,
       ts, num_requests_running, kv_cache_usage_perc
FROM engine_samples FINAL
WHERE (engine = {engine:String} OR startsWith(engine, concat({engine:String}, '#')))
  AND up
  AND ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts <= fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
ORDER BY idx, ts
