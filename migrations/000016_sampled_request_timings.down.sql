-- Back to 000015: overload_queue and diagnose read request_timings_window, the console's phases
-- and queue panels request_facts_window, every request of the period.
DROP VIEW IF EXISTS request_phases_sampled;
DROP VIEW IF EXISTS request_timings_sampled;
