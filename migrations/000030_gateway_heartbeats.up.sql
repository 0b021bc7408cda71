-- The gateway's heartbeats (schema gateway.heartbeat): each gateway's open requests, every
-- GATEWAY_HEARTBEAT_INTERVAL. The requests_hung rule reads each gateway's latest heartbeat, so a
-- request that hangs is counted whatever its age and until it ends or its gateway stops sending
-- heartbeats. One row per heartbeat, the open requests in parallel arrays, oldest first (ARRAY
-- JOIN them). Engine-keyed tables put the key first in ORDER BY, and so does this one: a rule reads
-- a few minutes of every gateway. TTL 14 days, as engine samples.
CREATE TABLE IF NOT EXISTS gateway_heartbeats
(
    event_id        String,
    ts              DateTime64(6, 'UTC'),
    gateway         LowCardinality(String),
    interval_s      Float64,
    listed_after_s  Float64,
    in_flight       UInt32,
    open_omitted    UInt32,
    open_request_id Array(String),
    open_arrival_ts Array(DateTime64(6, 'UTC')),
    open_model      Array(LowCardinality(String)),
    open_endpoint   Array(LowCardinality(String)),
    open_stream     Array(Bool),
    open_upstream   Array(LowCardinality(String)),
    open_app        Array(LowCardinality(String)),
    open_phase      Array(LowCardinality(String)),
    ingested_at     DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (gateway, ts, event_id)
TTL toDateTime(ts) + INTERVAL 14 DAY
SETTINGS non_replicated_deduplication_window = 10000
