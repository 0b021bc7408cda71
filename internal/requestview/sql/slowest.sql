-- The slowest requests of [from, to) by one of the gateway's own measurements ({order}: e2e_s,
-- ttft_s or tpot_s), of the model and app filters (empty: all), or those of the given ids when
-- {ids} is not empty (the queue order picks them: slowest_queue.sql). Duplicates of one event are
-- one row.
SELECT request_id, arrival_ts, toString(model), status_code, ttft_s, e2e_s, tpot_s, queue_s, prompt_tokens,
       completion_tokens, toString(finish_reason), stream
FROM requests
WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}
  AND ({model:String} = '' OR model = {model:String}) AND ({app:String} = '' OR app = {app:String})
  AND (empty({ids:Array(String)}) OR has({ids:Array(String)}, request_id))
  AND (NOT empty({ids:Array(String)}) OR {order:Identifier} IS NOT NULL)
ORDER BY {order:Identifier} DESC
LIMIT 1 BY request_id, arrival_ts
LIMIT {limit:UInt32}
