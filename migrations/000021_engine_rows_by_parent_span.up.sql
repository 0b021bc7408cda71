-- Engine rows belong to exactly one gateway request.
--
-- Before: engine_requests grouped the spans by request_id, the id vLLM's span carries
-- (gen_ai.request.id = chatcmpl-<X-Request-Id>), and request_facts_window, request_timings_window and
-- request_timings_sampled joined it to the gateway's rows on request_id alone. A caller's
-- X-Request-Id may repeat, so two requests with one id had their spans combined into one engine
-- row, which both gateway rows then read (each the other's timings and tokens), and a request vLLM
-- refused (before 0.14 a duplicate of a request still running: "Request id ... already running.")
-- borrowed the served one's tokens and TTFT.
--
-- Now a request's engine rows are the spans of one parent: engine_requests groups by
-- (request_id, trace_id, parent_span_id), and the views join on request_id, trace_id and
-- parent_span_id = requests.span_id, the gateway's own span id for that one request, sent to vLLM
-- as the traceparent's parent-id (migration 000020, docs/vllm-compatibility.md section 2). A request
-- vLLM refused has no span and so no engine data. engine_requests gains the column
-- parent_span_id, trace_id is now part of its key, and everything else keeps its meaning.
-- Rows written before 000020 have '' on both sides and join on request_id and trace_id as before.
-- request_facts_window and request_facts gain span_id and parent_span_id (the gateway's span for
-- the request and the client's). The views are replaced in place (CREATE OR REPLACE), so
-- request_phases_sampled, which reads request_timings_sampled by name, needs no change.

CREATE OR REPLACE VIEW engine_requests AS
SELECT
    request_id,
    any(engine)                                                                    AS engine,
    anyIf(model, model != '')                                                      AS model,
    trace_id,
    parent_span_id,
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
    -- One row per prompt of a request: its n children. A request is the spans of one parent:
    -- the gateway's span for one request (migration 000020), whatever X-Request-Id it carried.
    SELECT
        request_id,
        trace_id,
        parent_span_id,
        coalesce(prompt_index, 0)                                                  AS prompt,
        any(engine)                                                                AS engine,
        anyIf(model, model != '')                                                  AS model,
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
    GROUP BY request_id, trace_id, parent_span_id, prompt
)
GROUP BY request_id, trace_id, parent_span_id;

CREATE OR REPLACE VIEW request_facts_window AS
WITH coalesce(a.app_records, toUInt32(0)) > 0 AS by_request
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
    coalesce(r.output_foreign_chars, if(by_request, a.output_foreign_chars, t.output_foreign_chars)) AS output_foreign_chars,
    coalesce(r.output_script_violation, if(by_request, a.output_script_violation, t.output_script_violation)) AS output_script_violation,
    if(r.app != '', r.app, if(by_request, a.app, t.app))               AS app,
    if(r.prompt_version != '', r.prompt_version, if(by_request, a.prompt_version, t.prompt_version)) AS prompt_version,
    if(r.config_version != '', r.config_version, if(by_request, a.config_version, t.config_version)) AS config_version,
    if(r.index_version != '', r.index_version, if(by_request, a.index_version, t.index_version)) AS index_version,
    if(r.embedding_model_version != '', r.embedding_model_version,
       if(by_request, a.embedding_model_version, t.embedding_model_version)) AS embedding_model_version,
    if(by_request, a.retrieval_top_score, t.retrieval_top_score)       AS retrieval_top_score,
    if(by_request, a.retrieval_scores, t.retrieval_scores)             AS retrieval_scores,
    if(by_request, a.passage_ids, t.passage_ids)                       AS passage_ids,
    if(by_request, a.retrieval_s, t.retrieval_s)                       AS retrieval_s,
    if(by_request, a.cache_hit, t.cache_hit)                           AS cache_hit,
    if(by_request, a.cache_kind, t.cache_kind)                         AS cache_kind,
    if(by_request, a.citation_count, t.citation_count)                 AS citation_count,
    if(by_request, a.citations_missing, t.citations_missing)           AS citations_missing,
    if(by_request, a.error_layer, t.error_layer)                       AS app_error_layer,
    if(by_request, a.error_message, t.error_message)                   AS app_error_message,
    coalesce(if(by_request, a.app_records, t.app_records), toUInt32(0)) AS app_records,
    toLowCardinality(multiIf(by_request, 'request_id', coalesce(t.app_records, toUInt32(0)) > 0, 'trace_id', '')) AS app_join,
    r.trace_id                                                        AS trace_id,
    r.span_id                                                         AS span_id,
    r.parent_span_id                                                  AS parent_span_id,
    s.engine                                                          AS engine,
    r.upstream                                                        AS upstream,
    r.gateway                                                         AS gateway
FROM requests AS r FINAL
LEFT JOIN app_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR,
                       to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS a ON a.request_id = r.request_id
LEFT JOIN app_traces(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR,
                     to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS t ON t.trace_id = r.trace_id
LEFT JOIN engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                          to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS s ON s.request_id = r.request_id AND s.trace_id = r.trace_id AND s.parent_span_id = r.span_id
WHERE r.arrival_ts >= {from:DateTime64(6, 'UTC')}
  AND r.arrival_ts < {to:DateTime64(6, 'UTC')};

CREATE OR REPLACE VIEW request_timings_window AS
SELECT
    r.request_id                                                      AS request_id,
    r.arrival_ts                                                      AS arrival_ts,
    r.finished_ts                                                     AS finished_ts,
    r.model                                                           AS model,
    r.status_code                                                     AS status_code,
    coalesce(r.queue_s, s.queue_s)                                    AS queue_s,
    coalesce(r.prefill_s, s.prefill_s)                                AS prefill_s,
    coalesce(r.decode_s, s.decode_s)                                  AS decode_s,
    multiIf(r.ttft_s IS NOT NULL, r.ttft_s,
            s.ttft_s IS NOT NULL, s.ttft_s,
            r.queue_s + r.scheduled_to_first_token_s)                 AS ttft_s,
    r.tpot_s                                                          AS tpot_s,
    r.engine_itl_s                                                    AS engine_itl_s,
    s.tpot_s                                                          AS engine_tpot_s,
    r.e2e_s                                                           AS e2e_s,
    s.e2e_s                                                           AS engine_e2e_s,
    coalesce(r.prompt_tokens, s.prompt_tokens)                        AS prompt_tokens,
    coalesce(r.completion_tokens, s.completion_tokens)                AS completion_tokens,
    r.cached_tokens                                                   AS cached_tokens,
    r.finish_reason                                                   AS finish_reason,
    r.max_tokens                                                      AS max_tokens
FROM requests AS r FINAL
LEFT JOIN engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                          to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS s ON s.request_id = r.request_id AND s.trace_id = r.trace_id AND s.parent_span_id = r.span_id
WHERE r.arrival_ts >= {from:DateTime64(6, 'UTC')}
  AND r.arrival_ts < {to:DateTime64(6, 'UTC')};

CREATE OR REPLACE VIEW request_timings_sampled AS
WITH
    -- A scalar subquery is Nullable when the view runs and was not when it was created:
    -- coalesce keeps the column's type the view's structure says.
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT
    r.request_id                                                      AS request_id,
    r.arrival_ts                                                      AS arrival_ts,
    r.finished_ts                                                     AS finished_ts,
    r.model                                                           AS model,
    r.status_code                                                     AS status_code,
    coalesce(r.queue_s, s.queue_s)                                    AS queue_s,
    coalesce(r.prefill_s, s.prefill_s)                                AS prefill_s,
    coalesce(r.decode_s, s.decode_s)                                  AS decode_s,
    multiIf(r.ttft_s IS NOT NULL, r.ttft_s,
            s.ttft_s IS NOT NULL, s.ttft_s,
            r.queue_s + r.scheduled_to_first_token_s)                 AS ttft_s,
    r.tpot_s                                                          AS tpot_s,
    r.engine_itl_s                                                    AS engine_itl_s,
    s.tpot_s                                                          AS engine_tpot_s,
    r.e2e_s                                                           AS e2e_s,
    s.e2e_s                                                           AS engine_e2e_s,
    coalesce(r.prompt_tokens, s.prompt_tokens)                        AS prompt_tokens,
    coalesce(r.completion_tokens, s.completion_tokens)                AS completion_tokens,
    r.cached_tokens                                                   AS cached_tokens,
    r.finish_reason                                                   AS finish_reason,
    r.max_tokens                                                      AS max_tokens,
    r.app                                                             AS request_app,
    r.trace_id                                                        AS trace_id,
    s.engine                                                          AS engine,
    -- Float64, as ClickHouse's own _sample_factor: avgWeighted sums value × weight in the
    -- weight's type, and an integer weight would truncate every duration to whole seconds.
    toFloat64(sample_m)                                               AS sample_factor
FROM
(
    SELECT request_id, arrival_ts, finished_ts, model, status_code, queue_s, prefill_s, decode_s,
           ttft_s, scheduled_to_first_token_s, tpot_s, engine_itl_s, e2e_s, prompt_tokens,
           completion_tokens, cached_tokens, finish_reason, max_tokens, app, trace_id, span_id
    FROM requests FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE arrival_ts >= {from:DateTime64(6, 'UTC')}
      AND arrival_ts < {to:DateTime64(6, 'UTC')}
) AS r
LEFT JOIN
(
    SELECT *
    FROM engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                         to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR)
    WHERE xxh3(request_id) % sample_m = 0
    -- Filter the spans before FINAL merges them, not after: the merge then sees 1/m of the rows
    -- (measured on a day of 3.5 M spans: half the CPU). Correct here, where it is not in general:
    -- the filter reads only ts and request_id, which every copy of one event shares, so a
    -- de-duplicated event's copies pass or fail it together.
    SETTINGS optimize_move_to_prewhere_if_final = 1
) AS s ON s.request_id = r.request_id AND s.trace_id = r.trace_id AND s.parent_span_id = r.span_id;

CREATE OR REPLACE VIEW request_facts AS
SELECT *
FROM request_facts_window(from = '2000-01-01 00:00:00', to = '2200-01-01 00:00:00');
