-- diagnose_hourly: `servescope diagnose`'s baseline, kept by the hour.
--
-- A day's baseline at production rates (3.3 M requests a day) costs diagnose 3 s of reads even
-- sampled (migrations/000016): its five per-request reads each decompress every granule of the
-- day's id columns. The baseline's whole hours change little once past, so diagnose keeps, for each
-- hour and --model filter it has read, the mergeable partial aggregates of those reads, and later
-- reads of the same hours merge 24 rows instead of reading 3.3 M (internal/diagnose, hourly.go).
--
-- A row is the hour [hour, hour + 1 h) read under one model filter (model: '' for all models,
-- the filter's own semantics otherwise, as the live reads apply it):
--   *_rows              what the row was computed from: the row counts (without FINAL) of
--                       requests, engine_spans and app_records in the hour. diagnose recomputes an
--                       hour whose counts have moved by more than 0.1 % since (a dead-letter replay,
--                       a late batch), so a row never serves data it did not nearly all see. The
--                       spans and records of the hour's requests that land in the next hour (a
--                       request queued across the hour's end) are read but not counted here.
--   status_counts       requests per HTTP status code (exact: FINAL), the sum is the request count
--   sums                weighted sums for the means and shares: for a quantity q, q the sum of
--                       value x sample_factor and q.w the sum of sample_factor over the requests
--                       that carry it (000016's weights: exact below 100,000 requests an hour)
--   *_q                 t-digest states of the weighted per-request values, merged into p50 and p95
--   retrieval_*         the application's top-passage scores (every record, not sampled)
--   script_*, versions  the output script checks and the requests per version label value
--                       ('label<TAB>value'), sampled as the live reads sample them
--   sample_factor       the largest sample_factor of the hour's reads (1: exact)
-- ReplacingMergeTree: a recomputed hour replaces the older row (the last inserted wins, FINAL).
-- Only diagnose writes it. Dropping it loses nothing but the next diagnose's speed.

CREATE TABLE IF NOT EXISTS diagnose_hourly
(
    hour                   DateTime('UTC'),
    model                  LowCardinality(String),
    requests_rows          UInt64,
    spans_rows             UInt64,
    app_rows               UInt64,
    computed_at            DateTime64(3, 'UTC') DEFAULT now64(3),
    status_counts          Map(UInt16, UInt64),
    sums                   Map(LowCardinality(String), Float64),
    queue_s_q              AggregateFunction(quantilesTDigestWeighted(0.5, 0.95), Float64, UInt64),
    ttft_s_q               AggregateFunction(quantilesTDigestWeighted(0.5, 0.95), Float64, UInt64),
    tpot_s_q               AggregateFunction(quantilesTDigestWeighted(0.5, 0.95), Float64, UInt64),
    e2e_s_q                AggregateFunction(quantilesTDigestWeighted(0.5, 0.95), Float64, UInt64),
    retrieval_n            UInt64,
    retrieval_top_score_q  AggregateFunction(quantilesTDigestWeighted(0.5, 0.95), Float64, UInt64),
    script_checked         UInt64,
    script_violations      UInt64,
    versions               Map(String, UInt64),
    sample_factor          UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(hour)
ORDER BY (model, hour)
TTL hour + INTERVAL 32 DAY
