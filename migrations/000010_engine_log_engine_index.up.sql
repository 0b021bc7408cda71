-- engine_logs.engine_index: the engine a log line is about, spelt as vLLM's `engine` metric label
-- ('0', '1', ...), so a data-parallel server's per-engine stats lines ("Engine 001: ... Running:
-- 9 reqs") are not read as one engine's timeline, and join engine_samples' per-engine series.
-- It is filled from the stats line's "Engine NNN:" and from the engine-core process prefix
-- ("(EngineCore_DP1 pid=...)"), and is '' when the line names no engine. Rows written before this
-- migration keep ''.
ALTER TABLE engine_logs ADD COLUMN IF NOT EXISTS engine_index LowCardinality(String) DEFAULT '' AFTER logger;
