-- Back to 000011: app_records loses trace_id, app_traces goes, and app_requests and
-- request_facts_window join on request_id only again, as 000009 made them.
DROP VIEW IF EXISTS request_facts;
DROP VIEW IF EXISTS request_facts_window;
DROP VIEW IF EXISTS app_traces;
DROP VIEW IF EXISTS app_requests;

CREATE VIEW IF NOT EXISTS app_requests AS
SELECT
    request_id,
    max(r_ts)                                                                      AS last_record_ts,
    toUInt32(count())                                                              AS app_records,
    argMaxIf(r_app, r_ts, r_app != '')                                             AS app,
    argMaxIf(r_model, r_ts, r_model != '')                                         AS model,
    argMaxIf(r_passage_ids, r_ts, notEmpty(r_passage_ids))                         AS passage_ids,
    argMaxIf(r_retrieval_scores, r_ts, notEmpty(r_retrieval_scores))               AS retrieval_scores,
    argMaxIf(r_passage_sources, r_ts, notEmpty(r_passage_sources))                 AS passage_sources,
    argMaxIf(r_retrieval_top_score, r_ts, r_retrieval_top_score IS NOT NULL)       AS retrieval_top_score,
    argMaxIf(r_retrieval_s, r_ts, r_retrieval_s IS NOT NULL)                       AS retrieval_s,
    argMaxIf(r_embedding_model_version, r_ts, r_embedding_model_version != '')     AS embedding_model_version,
    argMaxIf(r_index_version, r_ts, r_index_version != '')                         AS index_version,
    argMaxIf(r_prompt_version, r_ts, r_prompt_version != '')                       AS prompt_version,
    argMaxIf(r_config_version, r_ts, r_config_version != '')                       AS config_version,
    argMaxIf(r_cache_hit, r_ts, r_cache_hit IS NOT NULL)                           AS cache_hit,
    argMaxIf(r_cache_kind, r_ts, r_cache_kind != '')                               AS cache_kind,
    argMaxIf(r_citation_count, r_ts, r_citation_count IS NOT NULL)                 AS citation_count,
    argMaxIf(r_citations_missing, r_ts, r_citations_missing IS NOT NULL)           AS citations_missing,
    argMaxIf(r_output_foreign_chars, r_ts, r_output_foreign_chars IS NOT NULL)     AS output_foreign_chars,
    argMaxIf(r_output_script_violation, r_ts, r_output_script_violation IS NOT NULL) AS output_script_violation,
    argMaxIf(r_error_layer, r_ts, r_error_layer != '')                             AS error_layer,
    argMaxIf(r_error_message, r_ts, r_error_layer != '' OR r_error_message != '')  AS error_message
FROM
(
    -- The records under other names, so that no result name hides a column.
    SELECT request_id, ts AS r_ts, app AS r_app, model AS r_model, passage_ids AS r_passage_ids,
           retrieval_scores AS r_retrieval_scores, passage_sources AS r_passage_sources,
           retrieval_top_score AS r_retrieval_top_score, retrieval_s AS r_retrieval_s,
           embedding_model_version AS r_embedding_model_version, index_version AS r_index_version,
           prompt_version AS r_prompt_version, config_version AS r_config_version,
           cache_hit AS r_cache_hit, cache_kind AS r_cache_kind,
           citation_count AS r_citation_count, citations_missing AS r_citations_missing,
           output_foreign_chars AS r_output_foreign_chars,
           output_script_violation AS r_output_script_violation, error_layer AS r_error_layer,
           error_message AS r_error_message
    FROM app_records FINAL
    WHERE ts >= {from:DateTime64(6, 'UTC')}
      AND ts < {to:DateTime64(6, 'UTC')}
)
GROUP BY request_id;

CREATE VIEW IF NOT EXISTS request_facts_window AS
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
    multiIf(r.ttft_s IS NOT NULL, r.ttft_s,
            s.ttft_s IS NOT NULL, s.ttft_s,
            r.queue_s + r.scheduled_to_first_token_s)                 AS ttft_s,
    toLowCardinality(multiIf(r.ttft_s IS NOT NULL, 'gateway',
            s.ttft_s IS NOT NULL, 'engine_span',
            r.queue_s IS NOT NULL AND r.scheduled_to_first_token_s IS NOT NULL, 'engine_timing',
            ''))                                                      AS ttft_source,
    r.ttft_s                                                          AS gateway_ttft_s,
    r.tpot_s                                                          AS tpot_s,
    r.e2e_s                                                           AS e2e_s,
    r.scheduled_to_first_token_s                                      AS scheduled_to_first_token_s,
    r.engine_itl_s                                                    AS engine_itl_s,
    s.ttft_s                                                          AS engine_ttft_s,
    s.tpot_s                                                          AS engine_tpot_s,
    s.e2e_s                                                           AS engine_e2e_s,
    coalesce(s.engine_children, toUInt32(0))                          AS engine_children,
    coalesce(s.engine_prompts, toUInt32(0))                           AS engine_prompts,
    s.finish_reasons                                                  AS engine_finish_reasons,
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
    coalesce(a.app_records, toUInt32(0))                              AS app_records,
    r.trace_id                                                        AS trace_id,
    s.engine                                                          AS engine,
    r.upstream                                                        AS upstream,
    r.gateway                                                         AS gateway
FROM requests AS r FINAL
LEFT JOIN app_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR,
                       to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS a ON a.request_id = r.request_id
LEFT JOIN engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                          to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS s ON s.request_id = r.request_id
WHERE r.arrival_ts >= {from:DateTime64(6, 'UTC')}
  AND r.arrival_ts < {to:DateTime64(6, 'UTC')};

CREATE VIEW IF NOT EXISTS request_facts AS
SELECT *
FROM request_facts_window(from = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00');

ALTER TABLE app_records DROP COLUMN IF EXISTS trace_id;
