-- The application's records of a request (app.record: one per request, or one per pipeline stage)
-- in [from, to): those carrying its request id, and those of its trace (an application that reports
-- through OpenTelemetry names the trace, not always the request id), oldest first.
SELECT ts, toString(app), toString(model), passage_ids, retrieval_scores, passage_sources,
       retrieval_top_score, retrieval_s, toString(embedding_model_version), toString(index_version),
       toString(prompt_version), toString(config_version), cache_hit, toString(cache_kind),
       citation_count, citations_missing, output_foreign_chars, output_script_violation,
       toString(error_layer), error_message, trace_id, request_id = {id:String} AS by_request_id
FROM app_records FINAL
WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')}
  AND (request_id = {id:String} OR ({trace_id:String} != '' AND trace_id = {trace_id:String}))
ORDER BY ts
LIMIT 20
