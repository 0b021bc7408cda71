-- Back to 000017: lookups by response, trace or engine request id read the whole column.
ALTER TABLE requests DROP INDEX IF EXISTS idx_response_id;
ALTER TABLE requests DROP INDEX IF EXISTS idx_trace_id;
ALTER TABLE requests_started DROP INDEX IF EXISTS idx_trace_id;
ALTER TABLE engine_spans DROP INDEX IF EXISTS idx_engine_request_id;
