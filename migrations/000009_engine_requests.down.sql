-- Back to 000007: request_facts joins the landing tables directly again, the combining views go
-- and engine_spans loses the child columns (its rows stay).
DROP VIEW IF EXISTS request_facts;
DROP VIEW IF EXISTS request_facts_window;
DROP VIEW IF EXISTS app_requests;
DROP VIEW IF EXISTS engine_requests;
CREATE VIEW IF NOT EXISTS request_facts AS
SELECT
    r.request_id                                                      AS request_id,
    r.arrival_ts                                                      AS arrival_ts,
    r.finished_ts                                                     AS finished_ts,
    r.model                                                           AS model,
    r.endpoint                                                        AS endpoint,
    r.stream                                                          AS stream,
    r.status_code                                                     AS status_code,
    r.error_layer                                                     AS error_layer,
    r.error_code                                                      AS error_code,
    r.error_message                                                   AS error_message,
    coalesce(r.queue_s, s.queue_s)                                    AS queue_s,
    coalesce(r.prefill_s, s.prefill_s)                                AS prefill_s,
    coalesce(r.decode_s, s.decode_s)                                  AS decode_s,
    s.inference_s                                                     AS inference_s,
    r.ttft_s                                                          AS ttft_s,
    r.tpot_s                                                          AS tpot_s,
    r.e2e_s                                                           AS e2e_s,
    r.scheduled_to_first_token_s                                      AS scheduled_to_first_token_s,
    s.ttft_s                                                          AS engine_ttft_s,
    s.e2e_s                                                           AS engine_e2e_s,
    coalesce(r.prompt_tokens, s.prompt_tokens)                        AS prompt_tokens,
    coalesce(r.completion_tokens, s.completion_tokens)                AS completion_tokens,
    r.cached_tokens                                                   AS cached_tokens,
    r.tokens_estimated                                                AS tokens_estimated,
    r.finish_reason                                                   AS finish_reason,
    r.max_tokens                                                      AS max_tokens,
    coalesce(r.output_foreign_chars, a.output_foreign_chars)          AS output_foreign_chars,
    coalesce(r.output_script_violation, a.output_script_violation)    AS output_script_violation,
    if(r.app != '', r.app, a.app)                                     AS app,
    if(r.prompt_version != '', r.prompt_version, a.prompt_version)    AS prompt_version,
    if(r.config_version != '', r.config_version, a.config_version)    AS config_version,
    if(r.index_version != '', r.index_version, a.index_version)       AS index_version,
    if(r.embedding_model_version != '', r.embedding_model_version, a.embedding_model_version) AS embedding_model_version,
    a.retrieval_top_score                                             AS retrieval_top_score,
    a.retrieval_scores                                                AS retrieval_scores,
    a.passage_ids                                                     AS passage_ids,
    a.retrieval_s                                                     AS retrieval_s,
    a.cache_hit                                                       AS cache_hit,
    a.cache_kind                                                      AS cache_kind,
    a.citation_count                                                  AS citation_count,
    a.citations_missing                                               AS citations_missing,
    a.error_layer                                                     AS app_error_layer,
    a.error_message                                                   AS app_error_message,
    r.trace_id                                                        AS trace_id,
    s.engine                                                          AS engine,
    r.upstream                                                        AS upstream,
    r.gateway                                                         AS gateway
FROM requests AS r FINAL
LEFT JOIN (SELECT * FROM app_records FINAL) AS a ON a.request_id = r.request_id
LEFT JOIN (SELECT * FROM engine_spans FINAL) AS s ON s.request_id = r.request_id;

ALTER TABLE engine_spans
    DROP COLUMN IF EXISTS finish_reason,
    DROP COLUMN IF EXISTS child_index,
    DROP COLUMN IF EXISTS prompt_index;
