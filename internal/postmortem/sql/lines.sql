-- One engine's log lines in a time range, in the order the engine wrote them (lines of the same
-- second keep their file order through the byte offset).
SELECT ts, engine, source, offset, line, level, process, logger, engine_index, engines, message,
       prompt_throughput_tps, generation_throughput_tps, running, waiting, kv_cache_usage_perc,
       prefix_cache_hit_rate, preemptions, exception_type, oom_bytes_requested, oom_total_capacity_bytes,
       oom_free_bytes, frames
FROM engine_logs FINAL
WHERE engine = {engine:String}
  AND ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts <= fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
ORDER BY ts, source, offset NULLS LAST, event_id
LIMIT {limit:UInt32}
