-- The latest fatal line (an out-of-memory size or an exception) of one engine (or any), at or
-- before a time (or ever): where a postmortem starts reading.
SELECT engine, ts
FROM engine_logs FINAL
WHERE (oom_bytes_requested IS NOT NULL OR exception_type != '')
  AND level IN ('', 'ERROR', 'CRITICAL')
  AND ({engine:String} = '' OR engine = {engine:String})
  AND ({at_us:Int64} = 0 OR ts <= fromUnixTimestamp64Micro({at_us:Int64}, 'UTC') + INTERVAL 1 MINUTE)
ORDER BY ts DESC
LIMIT 1
