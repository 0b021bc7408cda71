-- Back to 000013's ZSTD(3) for the id columns 000014 moved to ZSTD(6).

ALTER TABLE requests_started
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3));

ALTER TABLE requests
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN response_id CODEC(ZSTD(3)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3));

ALTER TABLE app_records
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN passage_ids CODEC(ZSTD(3));

ALTER TABLE engine_spans
    MODIFY COLUMN event_id CODEC(ZSTD(3)),
    MODIFY COLUMN request_id CODEC(ZSTD(3)),
    MODIFY COLUMN engine_request_id CODEC(ZSTD(3)),
    MODIFY COLUMN trace_id CODEC(ZSTD(3));
