-- The requests of [from, to) that waited longest in the engine's queue, by the queue wait
-- request_timings_window gives (the gateway's copy of vLLM's timing object, else the engine's span:
-- the engine data joined to its gateway request as everywhere else), of the model filter.
SELECT request_id, queue_s
FROM request_timings_window(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
WHERE queue_s IS NOT NULL AND ({model:String} = '' OR model = {model:String})
ORDER BY queue_s DESC
LIMIT 1 BY request_id
LIMIT {limit:UInt32}
