-- alert_deliveries records every attempt the detector made to POST an alert message to a webhook
-- receiver, and its result, for auditing notification delivery. One row per attempt.
-- receiver is the URL without credentials or query. status is the message status, firing or
-- resolved. http_status is 0 when no answer arrived (error holds the reason).
CREATE TABLE IF NOT EXISTS alert_deliveries
(
    ts           DateTime64(6, 'UTC'),
    receiver     LowCardinality(String),
    group_key    String,
    status       LowCardinality(String),
    attempt      UInt32,
    ok           Bool,
    http_status  UInt16,
    error        String,
    duration_s   Float64,
    fingerprints Array(String)
)
ENGINE = MergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (receiver, ts)
TTL toDateTime(ts) + INTERVAL 90 DAY;
