-- The engine's spans of one request (one per child: prompt of a multi-prompt completion, choice of
-- n > 1), as vLLM ended them in [from, to), with the trace each belongs to.
SELECT engine_request_id, prompt_index, child_index, trace_id, toString(engine), start_ts, ts,
       queue_s, prefill_s, decode_s, inference_s, ttft_s, e2e_s, prompt_tokens, completion_tokens,
       toString(finish_reason), max_tokens
FROM engine_spans FINAL
WHERE request_id = {id:String}
  AND ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')}
ORDER BY prompt_index, child_index, ts
LIMIT 64
