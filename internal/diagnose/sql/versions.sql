-- Which system served the window: requests per model, prompt, config, index and embedding model
-- version, from the gateway's and the application's records together. A request is counted once
-- by the 64-bit hash of its id (a collision among a window's ids has a chance below 1e-9, and
-- hashing UInt64s costs a third less than hashing the id strings: 220 -> 150 ms on an hour of
-- 150,000 requests). Above the sample's bound the counts are estimates (the sample's count times
-- m): a version is named when the sample holds one of its requests.
SELECT kind, value, toUInt64(uniqExact(rid) * any(m)) AS n, toUInt64(any(m)) AS sample_factor
FROM ({{template "versions_rows.sql"}})
GROUP BY kind, value
ORDER BY kind, n DESC, value
