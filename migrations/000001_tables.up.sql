-- servescope landing tables, one per event kind (docs/concepts.md, "What is recorded").
--
-- Every table is a ReplacingMergeTree whose ORDER BY ends in event_id: a message delivered twice
-- (a crash between insert and ack) is one row to queries that read with FINAL or argMax.
-- Tables also set non_replicated_deduplication_window so that the consumer's
-- insert_deduplication_token drops a retried batch at insert time.
-- Partitions are days, and the primary key starts with time (or engine, then time) so that a
-- windowed query reads only the parts and granules of its window.
-- TTL defaults: request and application records 30 days, engine samples and spans 14 days,
-- engine logs 30 days, alerts 365 days, ingest errors 30 days. Change them with
-- `servescope migrate ttl TABLE DAYS` (ALTER TABLE … MODIFY TTL).

CREATE TABLE IF NOT EXISTS requests_started
(
    event_id                String,
    request_id              String,
    ts                      DateTime64(6, 'UTC'),
    arrival_ts              DateTime64(6, 'UTC'),
    model                   LowCardinality(String),
    endpoint                LowCardinality(String),
    stream                  Bool,
    max_tokens              Nullable(UInt32),
    prompt_bytes            Nullable(UInt32),
    app                     LowCardinality(String),
    prompt_version          LowCardinality(String),
    config_version          LowCardinality(String),
    index_version           LowCardinality(String),
    embedding_model_version LowCardinality(String),
    trace_id                String,
    gateway                 LowCardinality(String),
    ingested_at             DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(arrival_ts)
ORDER BY (toStartOfHour(arrival_ts), request_id, event_id)
TTL toDateTime(arrival_ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS requests
(
    event_id                String,
    request_id              String,
    ts                      DateTime64(6, 'UTC'),
    arrival_ts              DateTime64(6, 'UTC'),
    finished_ts             DateTime64(6, 'UTC'),
    model                   LowCardinality(String),
    endpoint                LowCardinality(String),
    stream                  Bool,
    status_code             UInt16,
    error_layer             LowCardinality(String),
    error_code              LowCardinality(String),
    error_message           String,
    queue_s                 Nullable(Float64),
    prefill_s               Nullable(Float64),
    decode_s                Nullable(Float64),
    ttft_s                  Nullable(Float64),
    tpot_s                  Nullable(Float64),
    e2e_s                   Nullable(Float64),
    engine_ttft_s           Nullable(Float64),
    engine_itl_s            Nullable(Float64),
    prompt_tokens           Nullable(UInt32),
    completion_tokens       Nullable(UInt32),
    cached_tokens           Nullable(UInt32),
    tokens_estimated        Bool,
    finish_reason           LowCardinality(String),
    max_tokens              Nullable(UInt32),
    output_foreign_chars    Nullable(UInt32),
    output_script_violation Nullable(Bool),
    app                     LowCardinality(String),
    prompt_version          LowCardinality(String),
    config_version          LowCardinality(String),
    index_version           LowCardinality(String),
    embedding_model_version LowCardinality(String),
    trace_id                String,
    upstream                LowCardinality(String),
    gateway                 LowCardinality(String),
    prompt_text             String CODEC(ZSTD(3)),
    output_text             String CODEC(ZSTD(3)),
    ingested_at             DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(arrival_ts)
ORDER BY (toStartOfHour(arrival_ts), request_id, event_id)
TTL toDateTime(arrival_ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS app_records
(
    event_id                String,
    request_id              String,
    ts                      DateTime64(6, 'UTC'),
    app                     LowCardinality(String),
    model                   LowCardinality(String),
    passage_ids             Array(String),
    retrieval_scores        Array(Float64),
    passage_sources         Array(String),
    retrieval_top_score     Nullable(Float64),
    retrieval_s             Nullable(Float64),
    embedding_model_version LowCardinality(String),
    index_version           LowCardinality(String),
    prompt_version          LowCardinality(String),
    config_version          LowCardinality(String),
    cache_hit               Nullable(Bool),
    cache_kind              LowCardinality(String),
    citation_count          Nullable(UInt32),
    citations_missing       Nullable(Bool),
    output_foreign_chars    Nullable(UInt32),
    output_script_violation Nullable(Bool),
    error_layer             LowCardinality(String),
    error_message           String,
    ingested_at             DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (toStartOfHour(ts), request_id, event_id)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS engine_samples
(
    event_id             String,
    ts                   DateTime64(6, 'UTC'),
    engine               LowCardinality(String),
    model                LowCardinality(String),
    up                   Bool,
    scrape_error         String,
    scrape_duration_s    Nullable(Float64),
    num_requests_running Nullable(Float64),
    num_requests_waiting Nullable(Float64),
    kv_cache_usage_perc  Nullable(Float64),
    gauges               Map(LowCardinality(String), Float64),
    counters             Map(LowCardinality(String), Float64),
    histogram_sum        Map(LowCardinality(String), Float64),
    histogram_count      Map(LowCardinality(String), Float64),
    histogram_buckets    Map(LowCardinality(String), Array(Tuple(le Float64, count Float64))),
    ingested_at          DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (engine, ts, event_id)
TTL toDateTime(ts) + INTERVAL 14 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS engine_spans
(
    event_id          String,
    request_id        String,
    engine_request_id String,
    trace_id          String,
    span_id           String,
    ts                DateTime64(6, 'UTC'),
    start_ts          Nullable(DateTime64(6, 'UTC')),
    engine            LowCardinality(String),
    model             LowCardinality(String),
    queue_s           Nullable(Float64),
    prefill_s         Nullable(Float64),
    decode_s          Nullable(Float64),
    inference_s       Nullable(Float64),
    ttft_s            Nullable(Float64),
    e2e_s             Nullable(Float64),
    prompt_tokens     Nullable(UInt32),
    completion_tokens Nullable(UInt32),
    max_tokens        Nullable(UInt32),
    temperature       Nullable(Float64),
    top_p             Nullable(Float64),
    n                 Nullable(UInt32),
    ingested_at       DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (toStartOfHour(ts), request_id, event_id)
TTL toDateTime(ts) + INTERVAL 14 DAY
SETTINGS non_replicated_deduplication_window = 10000;

CREATE TABLE IF NOT EXISTS engine_logs
(
    event_id                  String,
    ts                        DateTime64(6, 'UTC'),
    engine                    LowCardinality(String),
    source                    LowCardinality(String),
    offset                    Nullable(UInt64),
    line                      String CODEC(ZSTD(3)),
    level                     LowCardinality(String),
    process                   LowCardinality(String),
    logger                    LowCardinality(String),
    message                   String CODEC(ZSTD(3)),
    prompt_throughput_tps     Nullable(Float64),
    generation_throughput_tps Nullable(Float64),
    running                   Nullable(UInt32),
    waiting                   Nullable(UInt32),
    kv_cache_usage_perc       Nullable(Float64),
    prefix_cache_hit_rate     Nullable(Float64),
    exception_type            LowCardinality(String),
    oom_bytes_requested       Nullable(UInt64),
    oom_total_capacity_bytes  Nullable(UInt64),
    oom_free_bytes            Nullable(UInt64),
    frames                    Array(String),
    ingested_at               DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (engine, ts, event_id)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- Alert state transitions written by the detector: one row per change (pending, firing,
-- resolved) and per notification, and the current state of a fingerprint is its latest row.
CREATE TABLE IF NOT EXISTS alerts
(
    ts          DateTime64(6, 'UTC'),
    rule        LowCardinality(String),
    fingerprint String,
    state       LowCardinality(String),
    severity    LowCardinality(String),
    value       Nullable(Float64),
    baseline    Nullable(Float64),
    threshold   Nullable(Float64),
    labels      Map(String, String),
    annotations Map(String, String),
    active_at   Nullable(DateTime64(6, 'UTC')),
    fired_at    Nullable(DateTime64(6, 'UTC')),
    resolved_at Nullable(DateTime64(6, 'UTC')),
    last_sent_at Nullable(DateTime64(6, 'UTC'))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(ts)
ORDER BY (rule, fingerprint, ts)
TTL toDateTime(ts) + INTERVAL 365 DAY
SETTINGS non_replicated_deduplication_window = 10000;

-- Messages the consumer refused (undecodable or invalid), each also sits in the dead-letter
-- stream. ts is the message's JetStream timestamp, so a redelivered refusal is one row to FINAL.
CREATE TABLE IF NOT EXISTS ingest_errors
(
    ts          DateTime64(6, 'UTC'),
    subject     LowCardinality(String),
    stream_seq  UInt64,
    reason      String,
    payload     String CODEC(ZSTD(3)),
    ingested_at DateTime64(6, 'UTC') DEFAULT now64(6)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMMDD(ts)
ORDER BY (toStartOfHour(ts), subject, stream_seq)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 10000;
