-- The gateway's record of one request's start (request.started), found by its id and arrival:
-- all there is of a request that has not finished.
SELECT request_id, arrival_ts, toString(model), toString(endpoint), stream, max_tokens, prompt_bytes,
       toString(app), toString(prompt_version), toString(config_version), toString(index_version),
       toString(embedding_model_version), trace_id, toString(gateway)
FROM requests_started FINAL
WHERE request_id = {id:String} AND arrival_ts = {arrival:DateTime64(6, 'UTC')}
LIMIT 1
