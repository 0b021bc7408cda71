ALTER TABLE engine_logs DROP COLUMN IF EXISTS preemptions, DROP COLUMN IF EXISTS engines;
ALTER TABLE engine_samples DROP COLUMN IF EXISTS engines, DROP COLUMN IF EXISTS engine_index;
ALTER TABLE engine_spans DROP COLUMN IF EXISTS parent_span_id;
ALTER TABLE requests DROP COLUMN IF EXISTS parent_span_id, DROP COLUMN IF EXISTS span_id;
