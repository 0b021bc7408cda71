-- Back to 000013: overload_queue and diagnose joined requests with engine_requests themselves.
DROP VIEW IF EXISTS request_timings_window;
