-- The engine's record of one request, its spans' children combined as everywhere else
-- (engine_requests, migrations/000009: queue until the first child was scheduled, prefill to the
-- first token of any child, decode to the last), read over the spans that ended in [from, to).
-- This file and engine_spans.sql are the one place the request page reads engine data: the join of
-- engine rows to a gateway request is settled by engine_requests, and follows it.
SELECT engine, toString(model), trace_id, start_ts, ts, engine_children, engine_prompts,
       queue_s, prefill_s, decode_s, inference_s, ttft_s, e2e_s, tpot_s, prompt_tokens,
       completion_tokens, arrayMap(x -> toString(x), finish_reasons), max_tokens
FROM engine_requests(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
WHERE request_id = {id:String}
LIMIT 1
