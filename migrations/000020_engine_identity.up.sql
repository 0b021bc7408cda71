-- Which engine request and which engine each engine row is about.
--
-- requests.span_id, requests.parent_span_id: the gateway takes part in the request's W3C trace.
-- It forwards traceparent with the trace id and sampled flag it received (or new ones) and its own
-- parent-id, span_id, a fresh 64-bit id per request, and keeps the client's parent-id as
-- parent_span_id. vLLM starts its llm_request span as a child of the traceparent it receives
-- (vllm/tracing.py extract_trace_context at 0.8 and 0.10, vllm/tracing/ on main), so that span's
-- parent is exactly one gateway request.
-- engine_spans.parent_span_id: that parent, from the OTLP span. A caller's X-Request-Id may
-- repeat (vLLM 0.14 and later accept concurrent duplicates, earlier releases refuse a duplicate
-- only while the first is running, and every release accepts one after it): the span carries the
-- caller's id (chatcmpl-<X-Request-Id>), so the engine rows of a request are those whose
-- (request_id, trace_id, parent_span_id) equal the gateway row's (request_id, trace_id, span_id)
-- (migration 000021). Rows written before this migration have '' on both sides and join as before.
--
-- engine_samples.engine_index, engines: the value of vLLM's `engine` label a sample is about
-- ('' on V0 and on failed scrapes) and how many engine cores the scrape exposed (data parallel:
-- --data-parallel-size N gives N). engine_samples.engine stays '<target>#<index>' for N > 1.
-- engine_logs.engines: N for an "N Engines Aggregated:" stats line (--aggregate-engine-logging):
-- its running and waiting are sums over N engines and its KV usage their mean, never one engine's
-- numbers. 1 for a line about one engine, NULL otherwise.
-- engine_logs.preemptions: the stats line's "Preemptions: N" (vLLM main, printed only when N > 0),
-- requests preempted during the logging interval. The counter vllm:num_preemptions_total is in
-- engine_samples.counters['num_preemptions_total'] already.

ALTER TABLE requests
    ADD COLUMN IF NOT EXISTS span_id String DEFAULT '' CODEC(ZSTD(3)) AFTER trace_id,
    ADD COLUMN IF NOT EXISTS parent_span_id String DEFAULT '' CODEC(ZSTD(3)) AFTER span_id;

ALTER TABLE engine_spans
    ADD COLUMN IF NOT EXISTS parent_span_id String DEFAULT '' CODEC(ZSTD(3)) AFTER span_id;

ALTER TABLE engine_samples
    ADD COLUMN IF NOT EXISTS engine_index LowCardinality(String) DEFAULT '' AFTER model,
    ADD COLUMN IF NOT EXISTS engines Nullable(UInt16) AFTER engine_index;

ALTER TABLE engine_logs
    ADD COLUMN IF NOT EXISTS engines Nullable(UInt16) AFTER engine_index,
    ADD COLUMN IF NOT EXISTS preemptions Nullable(UInt32) AFTER prefix_cache_hit_rate;
