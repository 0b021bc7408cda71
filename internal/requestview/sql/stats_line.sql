-- The engine's own periodic stats line (vLLM logs running, waiting and KV use every 10 s) nearest
-- an instant, within a minute either side.
SELECT ts, running, waiting, kv_cache_usage_perc
FROM engine_logs
WHERE engine = {engine:String} AND (running IS NOT NULL OR kv_cache_usage_perc IS NOT NULL)
  AND ts >= {at:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE
  AND ts <= {at:DateTime64(6, 'UTC')} + INTERVAL 1 MINUTE
ORDER BY abs(toUnixTimestamp64Micro(ts) - toUnixTimestamp64Micro({at:DateTime64(6, 'UTC')}))
LIMIT 1
