-- The engine's record of one request, its spans' children combined as everywhere else
-- (engine_requests, migrations/000009: queue until the first child was scheduled, prefill to the
-- first token of any child, decode to the last), read over the spans that ended in [from, to).
-- This file and engine_spans.sql are the one place the request page reads engine data, and they join
-- as request_facts_window does (migration 000021): the engine rows of one gateway request are those
-- whose (request_id, trace_id, parent_span_id) are its (request_id, trace_id, span_id), so another
-- request that reused the caller's X-Request-Id, even in the same trace, is not read. A gateway row
-- without a span id (written before migration 000020, or not finished) takes the id's engine rows of
-- its trace first.
SELECT engine, toString(model), trace_id, start_ts, ts, engine_children, engine_prompts,
       queue_s, prefill_s, decode_s, inference_s, ttft_s, e2e_s, tpot_s, prompt_tokens,
       completion_tokens, arrayMap(x -> toString(x), finish_reasons), max_tokens
FROM engine_requests(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
WHERE request_id = {id:String}
  AND if({span_id:String} != '', trace_id = {trace_id:String} AND parent_span_id = {span_id:String},
         {trace_id:String} = '' OR trace_id IN ({trace_id:String}, ''))
ORDER BY trace_id = {trace_id:String} DESC, ts
LIMIT 1
