-- The gateway's record of one finished request (request.finished), found by its id and arrival.
SELECT request_id, arrival_ts, finished_ts, toString(model), toString(endpoint), stream, status_code,
       toString(error_layer), toString(error_code), error_message,
       queue_s, prefill_s, decode_s, ttft_s, tpot_s, e2e_s, scheduled_to_first_token_s, engine_itl_s,
       prompt_tokens, completion_tokens, cached_tokens, tokens_estimated, toString(finish_reason),
       arrayMap(x -> toString(x), finish_reasons), response_id, max_tokens, output_foreign_chars,
       output_script_violation, toString(app), toString(prompt_version), toString(config_version),
       toString(index_version), toString(embedding_model_version), trace_id, trace_sampled,
       toString(upstream), toString(gateway)
FROM requests FINAL
WHERE request_id = {id:String} AND arrival_ts = {arrival:DateTime64(6, 'UTC')}
LIMIT 1
