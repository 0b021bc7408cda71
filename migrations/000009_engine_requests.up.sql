-- One engine row per request.
--
-- vLLM runs one engine request per prompt of a multi-prompt /v1/completions request and one per
-- choice when n > 1, and ends one llm_request span per engine request: an API request can have
-- several engine.span rows (its children). The collector gives every child the API request's
-- request_id and, when vLLM's id tells, prompt_index and child_index. engine_requests combines
-- the children of each request, and request_facts, diagnose and the detector read engine rows
-- through it, so a request is one row everywhere users query. The semantics (docs/concepts.md, "One
-- row per request, and which TTFT to read"), from vLLM's own per-request metric definitions
-- (vllm/v1/metrics/stats.py, vllm/v1/metrics/loggers.py), on the request's timeline (its children
-- enter the engine together, vLLM adds them in one call):
--   queue_s       the wait until the engine first scheduled any child (the least queue time)
--   ttft_s        arrival to the first token of any child (the first content a client can get)
--   prefill_s     first scheduling to that first token
--   decode_s      that first token to the last token of any child
--   inference_s   first scheduling to the last token (prefill_s + decode_s)
--   e2e_s         arrival to the end of the last child
--   tpot_s        vLLM's per-request TPOT, decode time / (output tokens - 1), averaged over the
--                 children: each child is one stream of tokens
--   prompt_tokens the prompts' tokens, each prompt once (children of one prompt share it), as
--                 vLLM's usage.prompt_tokens
--   completion_tokens  the children's output tokens summed, as vLLM's usage.completion_tokens
--   finish_reasons     each child's finish reason, sorted
--   engine_children    how many spans were combined, engine_prompts how many prompts
-- With one child every value is that child's own.
--
-- engine_requests(from, to) reads the spans that ended in [from, to), so that a window reads only
-- its partitions. request_facts_window(from, to) is request_facts for the requests that arrived
-- in [from, to), reading spans up to an hour after `to`. request_facts is the same over all time.
--
-- Several app.records of one request (a retry, one per pipeline stage) are combined by
-- app_requests(from, to): each field comes from the latest record that set it, app_records
-- counts the records and last_record_ts is the latest one's time.
--
-- TTFT from arrival, named by its source (ttft_source): the gateway's measurement of a stream
-- (arrival to the first content chunk, 'gateway'), else the engine span's
-- gen_ai.latency.time_to_first_token ('engine_span'), else the engine's per-request timing object
-- in the response, queue_s + scheduled_to_first_token_s ('engine_timing'), else NULL and ''.

ALTER TABLE engine_spans
    ADD COLUMN IF NOT EXISTS prompt_index Nullable(UInt32) AFTER engine_request_id,
    ADD COLUMN IF NOT EXISTS child_index Nullable(UInt32) AFTER prompt_index,
    ADD COLUMN IF NOT EXISTS finish_reason LowCardinality(String) AFTER completion_tokens;

CREATE VIEW IF NOT EXISTS engine_requests AS
SELECT
    request_id,
    any(engine)                                                                    AS engine,
    anyIf(model, model != '')                                                      AS model,
    any(trace_id)                                                                  AS trace_id,
    min(start_ts)                                                                  AS start_ts,
    max(end_ts)                                                                    AS ts,
    toUInt32(sum(children))                                                        AS engine_children,
    toUInt32(count())                                                              AS engine_prompts,
    min(p_queue_s)                                                                 AS queue_s,
    -- On the request's timeline (a difference below zero is rounding, read as zero).
    if(engine_children = 1, any(one_prefill_s),
       if((min(first_token_at) - coalesce(queue_s, 0) AS prefill_d) < 0, 0, prefill_d)) AS prefill_s,
    if(engine_children = 1, any(one_decode_s),
       if((max(last_token_at) - min(first_token_at) AS decode_d) < 0, 0, decode_d)) AS decode_s,
    if(engine_children = 1, any(one_inference_s),
       if((max(last_token_at) - coalesce(queue_s, 0) AS inference_d) < 0, 0, inference_d)) AS inference_s,
    min(p_ttft_s)                                                                  AS ttft_s,
    max(p_e2e_s)                                                                   AS e2e_s,
    sum(tpot_sum) / nullIf(sum(tpot_n), 0)                                         AS tpot_s,
    CAST(sum(p_prompt_tokens) AS Nullable(UInt32))                                 AS prompt_tokens,
    CAST(sum(p_completion_tokens) AS Nullable(UInt32))                             AS completion_tokens,
    arraySort(arrayFlatten(groupArray(p_finish_reasons)))                          AS finish_reasons,
    max(p_max_tokens)                                                              AS max_tokens
FROM
(
    -- One row per prompt of a request: its n children.
    SELECT
        request_id,
        coalesce(prompt_index, 0)                                                  AS prompt,
        any(engine)                                                                AS engine,
        anyIf(model, model != '')                                                  AS model,
        any(trace_id)                                                              AS trace_id,
        min(start_ts)                                                              AS start_ts,
        max(ts)                                                                    AS end_ts,
        count()                                                                    AS children,
        min(queue_s)                                                               AS p_queue_s,
        -- Times since the children were enqueued: their first and last tokens.
        min(coalesce(queue_s, 0) + prefill_s)                                      AS first_token_at,
        max(coalesce(queue_s, 0) + coalesce(inference_s, prefill_s + decode_s))    AS last_token_at,
        any(prefill_s)                                                             AS one_prefill_s,
        any(decode_s)                                                              AS one_decode_s,
        any(inference_s)                                                           AS one_inference_s,
        min(ttft_s)                                                                AS p_ttft_s,
        max(e2e_s)                                                                 AS p_e2e_s,
        sumIf(decode_s / (completion_tokens - 1), completion_tokens > 1)           AS tpot_sum,
        countIf(completion_tokens > 1 AND decode_s IS NOT NULL)                    AS tpot_n,
        max(prompt_tokens)                                                         AS p_prompt_tokens,
        sum(completion_tokens)                                                     AS p_completion_tokens,
        groupArrayIf(finish_reason, finish_reason != '')                           AS p_finish_reasons,
        max(max_tokens)                                                            AS p_max_tokens
    FROM engine_spans FINAL
    WHERE ts >= {from:DateTime64(6, 'UTC')}
      AND ts < {to:DateTime64(6, 'UTC')}
    GROUP BY request_id, prompt
)
GROUP BY request_id;

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

DROP VIEW IF EXISTS request_facts;

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
