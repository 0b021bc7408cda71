DROP TABLE IF EXISTS ingest_errors;
DROP TABLE IF EXISTS alerts;
DROP TABLE IF EXISTS engine_logs;
DROP TABLE IF EXISTS engine_spans;
DROP TABLE IF EXISTS engine_samples;
DROP TABLE IF EXISTS app_records;
DROP TABLE IF EXISTS requests;
DROP TABLE IF EXISTS requests_started;
