-- How much has been recorded at all, and until when: tells an empty window from empty tables.
SELECT
    (SELECT count() FROM requests)       AS requests,
    (SELECT count() FROM app_records)    AS app_records,
    (SELECT count() FROM engine_samples) AS engine_samples,
    (SELECT count() FROM engine_spans)   AS engine_spans,
    (SELECT count() FROM engine_logs)    AS engine_logs,
    greatest((SELECT max(arrival_ts) FROM requests), (SELECT max(ts) FROM app_records),
             (SELECT max(ts) FROM engine_samples), (SELECT max(ts) FROM engine_spans),
             (SELECT max(ts) FROM engine_logs)) AS latest
