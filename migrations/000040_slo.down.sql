DROP VIEW IF EXISTS slo_error_budget;
DROP VIEW IF EXISTS slo_goodput;
DROP VIEW IF EXISTS slo_requests_window;
DROP TABLE IF EXISTS slo_objectives;
