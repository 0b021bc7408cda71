-- Compression codecs for the landing tables, chosen by measuring each column's bytes on disk after
-- merges over a generated history (dev/history, `scripts/bench storage` prints the figures before
-- and after this migration side by side). LZ4, the default, leaves random text as it is:
--   - ids (event, request, trace, span and response ids: hex digits or KSUIDs, random by design)
--     and other free text: ZSTD(3), which entropy-codes them to about their information content
--     (a 32-hex-digit trace id from 32 bytes to about 18)
--   - times: ZSTD(1) (rows sort by hour then request id, so times are near-sorted but not evenly
--     spaced: Delta and DoubleDelta before ZSTD measured larger). ingested_at, a batch's one
--     insert time repeated: DoubleDelta then ZSTD(1)
--   - durations and scores (Float64): ZSTD(1), 8% under LZ4 on log-normal values (Gorilla before
--     it saved 7% more of these columns but decodes slower, and the detector reads them)
--   - counts (UInt32, UInt64): ZSTD(1)
--   - maps and arrays of engine samples and application records: ZSTD(3).
-- LowCardinality and Bool columns are dictionary- or bit-sized already and keep the default.
-- A codec applies to parts written from now on and to merged parts, existing parts keep theirs
-- until merged (OPTIMIZE TABLE … FINAL rewrites them at once).

ALTER TABLE requests_started
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN arrival_ts CODEC(ZSTD(1)),
    MODIFY COLUMN max_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN prompt_bytes CODEC(ZSTD(1)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE requests
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN arrival_ts CODEC(ZSTD(1)),
    MODIFY COLUMN finished_ts CODEC(ZSTD(1)),
    MODIFY COLUMN error_message CODEC(ZSTD(3)),
    MODIFY COLUMN queue_s CODEC(ZSTD(1)),
    MODIFY COLUMN prefill_s CODEC(ZSTD(1)),
    MODIFY COLUMN decode_s CODEC(ZSTD(1)),
    MODIFY COLUMN ttft_s CODEC(ZSTD(1)),
    MODIFY COLUMN tpot_s CODEC(ZSTD(1)),
    MODIFY COLUMN e2e_s CODEC(ZSTD(1)),
    MODIFY COLUMN scheduled_to_first_token_s CODEC(ZSTD(1)),
    MODIFY COLUMN engine_itl_s CODEC(ZSTD(1)),
    MODIFY COLUMN prompt_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN completion_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN cached_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN response_id CODEC(ZSTD(3)),
    MODIFY COLUMN max_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN output_foreign_chars CODEC(ZSTD(1)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE app_records
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN passage_ids CODEC(ZSTD(3)),
    MODIFY COLUMN retrieval_scores CODEC(ZSTD(3)),
    MODIFY COLUMN passage_sources CODEC(ZSTD(3)),
    MODIFY COLUMN retrieval_top_score CODEC(ZSTD(1)),
    MODIFY COLUMN retrieval_s CODEC(ZSTD(1)),
    MODIFY COLUMN citation_count CODEC(ZSTD(1)),
    MODIFY COLUMN output_foreign_chars CODEC(ZSTD(1)),
    MODIFY COLUMN error_message CODEC(ZSTD(3)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE engine_spans
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN engine_request_id CODEC(ZSTD(3)),
    MODIFY COLUMN prompt_index CODEC(ZSTD(1)),
    MODIFY COLUMN child_index CODEC(ZSTD(1)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3)),
    MODIFY COLUMN span_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN start_ts CODEC(ZSTD(1)),
    MODIFY COLUMN queue_s CODEC(ZSTD(1)),
    MODIFY COLUMN prefill_s CODEC(ZSTD(1)),
    MODIFY COLUMN decode_s CODEC(ZSTD(1)),
    MODIFY COLUMN inference_s CODEC(ZSTD(1)),
    MODIFY COLUMN ttft_s CODEC(ZSTD(1)),
    MODIFY COLUMN e2e_s CODEC(ZSTD(1)),
    MODIFY COLUMN prompt_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN completion_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN max_tokens CODEC(ZSTD(1)),
    MODIFY COLUMN temperature CODEC(ZSTD(1)),
    MODIFY COLUMN top_p CODEC(ZSTD(1)),
    MODIFY COLUMN n CODEC(ZSTD(1)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE engine_samples
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN scrape_error CODEC(ZSTD(3)),
    MODIFY COLUMN scrape_duration_s CODEC(ZSTD(1)),
    MODIFY COLUMN num_requests_running CODEC(ZSTD(1)),
    MODIFY COLUMN num_requests_waiting CODEC(ZSTD(1)),
    MODIFY COLUMN kv_cache_usage_perc CODEC(ZSTD(1)),
    MODIFY COLUMN gauges CODEC(ZSTD(3)),
    MODIFY COLUMN counters CODEC(ZSTD(3)),
    MODIFY COLUMN histogram_sum CODEC(ZSTD(3)),
    MODIFY COLUMN histogram_count CODEC(ZSTD(3)),
    MODIFY COLUMN histogram_buckets CODEC(ZSTD(3)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));

ALTER TABLE engine_logs
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN ts CODEC(ZSTD(1)),
    MODIFY COLUMN offset CODEC(ZSTD(1)),
    MODIFY COLUMN prompt_throughput_tps CODEC(ZSTD(1)),
    MODIFY COLUMN generation_throughput_tps CODEC(ZSTD(1)),
    MODIFY COLUMN running CODEC(ZSTD(1)),
    MODIFY COLUMN waiting CODEC(ZSTD(1)),
    MODIFY COLUMN kv_cache_usage_perc CODEC(ZSTD(1)),
    MODIFY COLUMN prefix_cache_hit_rate CODEC(ZSTD(1)),
    MODIFY COLUMN oom_bytes_requested CODEC(ZSTD(1)),
    MODIFY COLUMN oom_total_capacity_bytes CODEC(ZSTD(1)),
    MODIFY COLUMN oom_free_bytes CODEC(ZSTD(1)),
    MODIFY COLUMN frames CODEC(ZSTD(3)),
    MODIFY COLUMN ingested_at CODEC(DoubleDelta, ZSTD(1));
