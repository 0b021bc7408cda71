-- The captured text of some requests, its first 300 characters, for a viewer allowed to see it.
SELECT request_id, arrival_ts, substring(prompt_text, 1, 300), substring(output_text, 1, 300)
FROM requests
WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}
  AND has({ids:Array(String)}, request_id)
LIMIT 1 BY request_id, arrival_ts
