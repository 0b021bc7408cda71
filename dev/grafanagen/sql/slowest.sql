-- The slowest requests of the range by E2E, as the console's dashboard lists them: each request id
-- links to its page in the console (the panel's data link), which the arrival picks exactly when a
-- caller reused its X-Request-Id.
SELECT request_id,
       formatDateTime(arrival_ts, '%Y-%m-%dT%H:%i:%S.%fZ', 'UTC') AS arrival,
       toString(model) AS model, status_code, queue_s, ttft_s, e2e_s, prompt_tokens, completion_tokens,
       toString(finish_reason) AS finish_reason
FROM requests
WHERE $__timeFilter(arrival_ts) AND e2e_s IS NOT NULL
  AND (${model:sqlstring} = '' OR model = ${model:sqlstring})
  AND (${app:sqlstring} = '' OR app = ${app:sqlstring})
ORDER BY e2e_s DESC
LIMIT 1 BY request_id, arrival_ts
LIMIT 20
