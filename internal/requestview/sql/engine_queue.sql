-- The engine's queue wait of some requests that arrived in [from, to), as request_timings_window
-- joins it to each gateway request (migration 000021: the spans whose parent is that request's
-- gateway span), so two requests reusing one X-Request-Id keep their own.
SELECT request_id, arrival_ts, queue_s
FROM request_timings_window(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
WHERE has({ids:Array(String)}, request_id) AND queue_s IS NOT NULL
