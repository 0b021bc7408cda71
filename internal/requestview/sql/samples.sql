-- The engine's state around an instant from its /metrics samples: for each engine (or the named
-- one), the last successful sample at or before the instant and the first after it, within two
-- minutes either side.
SELECT toString(engine), ts, ts <= {at:DateTime64(6, 'UTC')} AS before, num_requests_running,
       num_requests_waiting, kv_cache_usage_perc
FROM engine_samples
WHERE ({engine:String} = '' OR engine = {engine:String}) AND up
  AND ts >= {at:DateTime64(6, 'UTC')} - INTERVAL 2 MINUTE
  AND ts <= {at:DateTime64(6, 'UTC')} + INTERVAL 2 MINUTE
ORDER BY abs(toUnixTimestamp64Micro(ts) - toUnixTimestamp64Micro({at:DateTime64(6, 'UTC')}))
LIMIT 1 BY engine, before
