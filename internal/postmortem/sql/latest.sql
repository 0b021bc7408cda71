-- The engine with the latest log line (or the named one), and that line's time, for a
-- postmortem that finds no fatal line; count is every line of the table.
SELECT
    (SELECT count() FROM engine_logs)                                                        AS lines,
    (SELECT argMax(engine, ts) FROM engine_logs WHERE {engine:String} = '' OR engine = {engine:String}) AS engine,
    (SELECT max(ts) FROM engine_logs WHERE {engine:String} = '' OR engine = {engine:String}) AS latest
