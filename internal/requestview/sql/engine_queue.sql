-- The engine's queue wait of some requests (engine_requests: the least queue time of their
-- children), read over the spans that ended in [from, to).
SELECT request_id, queue_s
FROM engine_requests(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
WHERE has({ids:Array(String)}, request_id) AND queue_s IS NOT NULL
