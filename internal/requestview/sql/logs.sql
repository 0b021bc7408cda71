-- The engine's log lines of a request: the named engine's lines between the request's start and
-- end (from, to), and any engine's lines naming the request's id within the hour around it (vLLM
-- logs "Added request <id>", "Aborted request <id>" with the engine request id, which holds the
-- request id). In the order the engine wrote them; at most limit.
SELECT ts, toString(engine), toString(level), toString(process), message, running, waiting, kv_cache_usage_perc,
       toString(exception_type), oom_bytes_requested,
       {id:String} != '' AND position(message, {id:String}) > 0 AS names_request
FROM engine_logs FINAL
WHERE (({engine:String} != '' AND engine = {engine:String}
        AND ts >= {from:DateTime64(6, 'UTC')} AND ts <= {to:DateTime64(6, 'UTC')})
       OR ({id:String} != '' AND ts >= {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
           AND ts <= {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR AND position(message, {id:String}) > 0))
ORDER BY ts, source, offset NULLS LAST, event_id
LIMIT {limit:UInt32}
