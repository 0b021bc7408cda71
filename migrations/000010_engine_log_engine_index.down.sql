ALTER TABLE engine_logs DROP COLUMN IF EXISTS engine_index;
