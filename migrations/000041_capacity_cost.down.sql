DROP VIEW IF EXISTS capacity_window;
DROP VIEW IF EXISTS cost_window;
DROP TABLE IF EXISTS engine_config;
