-- request.finished fields the gateway fills since vLLM fidelity work:
--   finish_reasons  every choice's finish_reason by choice index (n > 1, several prompts), the
--                   OpenTelemetry gen_ai.response.finish_reasons, '' for a choice without one
--   response_id     the id the engine gave its answer (gen_ai.response.id), e.g. chatcmpl-<id>,
--                   cmpl-<id>, embd-<id>, resp_<uuid>
--   trace_sampled   the sampled flag of the traceparent forwarded to the engine (false: the client
--                   asked not to sample, so vLLM records no span), NULL for older events
ALTER TABLE requests
    ADD COLUMN IF NOT EXISTS finish_reasons Array(LowCardinality(String)) AFTER finish_reason,
    ADD COLUMN IF NOT EXISTS response_id String AFTER finish_reasons,
    ADD COLUMN IF NOT EXISTS trace_sampled Nullable(Bool) AFTER trace_id;
