-- The captured prompt and output text of one request (GATEWAY_CAPTURE_CONTENT). Read only for a
-- viewer allowed to see content: the console's ClickHouse account has no SELECT on these columns
-- unless content capture is on (internal/access).
SELECT prompt_text, output_text
FROM requests FINAL
WHERE request_id = {id:String} AND arrival_ts = {arrival:DateTime64(6, 'UTC')}
LIMIT 1
