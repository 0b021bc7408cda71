-- ZSTD(6) instead of 000013's ZSTD(3) for the columns of random ids, measured on a generated
-- history (dev/history: `scripts/bench storage` shows the bytes per request before 000013, after
-- it and after this migration side by side). A random id is about its information content at any
-- level, but level 6's longer search finds the repeated framing of each id (a KSUID's leading
-- timestamp digits, a hex id's alphabet) that level 3 leaves: after merges, per row, a KSUID (event
-- and request ids, response and engine request ids) 18.0 → 17.5 bytes, a 32-digit hex trace id
-- 18.2 → 16.6 bytes (0.6 byte above its 16 bytes of entropy, all that storing it binary as
-- FixedString(16) would save), passage ids 11.6 → 11.4. Levels 9 to 19 saved at most 1.5 bytes an id
-- more, at 2 to 13 times the merge time, where level 6 merged as fast as 3. A 16-digit span id and
-- the passage sources measured larger at level 6 and keep ZSTD(3).
-- Existing parts keep their codec until merged (OPTIMIZE TABLE … FINAL rewrites them at once).

ALTER TABLE requests_started
    MODIFY COLUMN event_id CODEC(ZSTD(6)),
    MODIFY COLUMN request_id CODEC(ZSTD(6)),
    MODIFY COLUMN trace_id CODEC(ZSTD(6));

ALTER TABLE requests
    MODIFY COLUMN event_id CODEC(ZSTD(6)),
    MODIFY COLUMN request_id CODEC(ZSTD(6)),
    MODIFY COLUMN response_id CODEC(ZSTD(6)),
    MODIFY COLUMN trace_id CODEC(ZSTD(6));

ALTER TABLE app_records
    MODIFY COLUMN event_id CODEC(ZSTD(6)),
    MODIFY COLUMN request_id CODEC(ZSTD(6)),
    MODIFY COLUMN passage_ids CODEC(ZSTD(6));

ALTER TABLE engine_spans
    MODIFY COLUMN event_id CODEC(ZSTD(6)),
    MODIFY COLUMN request_id CODEC(ZSTD(6)),
    MODIFY COLUMN engine_request_id CODEC(ZSTD(6)),
    MODIFY COLUMN trace_id CODEC(ZSTD(6));
