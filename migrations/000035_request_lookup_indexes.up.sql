-- Looking a request up by another id than request_id (servescope request, the console's request
-- page: internal/requestview/sql/find.sql): the engine's answer id, the trace id, an engine
-- request id. request_id leads each table's sorting key after the hour and needs no index, these
-- columns are in no key, so without an index a lookup reads the whole column of every part.
-- Bloom filters (1% false positives, one per granule) let it skip the granules that cannot hold
-- the id. Parts written before this migration get the index when they are merged (ALTER TABLE
-- ... MATERIALIZE INDEX builds it at once, at the cost of reading those parts).
ALTER TABLE requests ADD INDEX IF NOT EXISTS idx_response_id response_id TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE requests ADD INDEX IF NOT EXISTS idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE requests_started ADD INDEX IF NOT EXISTS idx_trace_id trace_id TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE engine_spans ADD INDEX IF NOT EXISTS idx_engine_request_id engine_request_id TYPE bloom_filter(0.01) GRANULARITY 1;
