DROP VIEW IF EXISTS engine_window_averages;
DROP VIEW IF EXISTS engine_window_histograms;
DROP VIEW IF EXISTS engine_timeline;
