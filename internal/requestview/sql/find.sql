-- The requests an id names, newest first: a gateway request id (the caller's X-Request-Id when it
-- sent one, else the gateway's KSUID: both are request_id), the engine's answer id (response_id,
-- e.g. chatcmpl-<X-Request-Id>), the W3C trace id, or an engine request id of the request's spans
-- (engine_spans.engine_request_id, e.g. chatcmpl-<id>-0). Finished requests come from requests;
-- requests that started and have not finished (in flight, or lost) from requests_started. One
-- branch per id kind, so that each uses its own index (request_id is in the tables' sorting key,
-- response_id and trace_id have bloom filters: migrations/000035). Duplicates of one event, and
-- the started row of a finished request, are one row (LIMIT 1 BY, the finished row first).
SELECT request_id, arrival_ts, finished, finished_ts, model, status_code, response_id, trace_id, matched_by
FROM
(
    SELECT request_id, arrival_ts, true AS finished, toNullable(finished_ts) AS finished_ts,
           toString(model) AS model, toNullable(status_code) AS status_code, response_id, trace_id,
           'request_id' AS matched_by
    FROM requests
    WHERE request_id = {id:String}
    UNION ALL
    SELECT request_id, arrival_ts, true, toNullable(finished_ts), toString(model), toNullable(status_code),
           response_id, trace_id, 'response_id'
    FROM requests
    WHERE response_id = {id:String}
    UNION ALL
    SELECT request_id, arrival_ts, true, toNullable(finished_ts), toString(model), toNullable(status_code),
           response_id, trace_id, 'trace_id'
    FROM requests
    WHERE trace_id = {id:String}
    UNION ALL
    SELECT request_id, arrival_ts, true, toNullable(finished_ts), toString(model), toNullable(status_code),
           response_id, trace_id, 'engine_request_id'
    FROM requests
    WHERE request_id GLOBAL IN (SELECT request_id FROM engine_spans WHERE engine_request_id = {id:String})
    UNION ALL
    SELECT request_id, arrival_ts, false, CAST(NULL AS Nullable(DateTime64(6, 'UTC'))), toString(model),
           CAST(NULL AS Nullable(UInt16)), '', trace_id, if(request_id = {id:String}, 'request_id', 'trace_id')
    FROM requests_started
    WHERE request_id = {id:String} OR trace_id = {id:String}
)
ORDER BY request_id, arrival_ts, finished DESC
LIMIT 1 BY request_id, arrival_ts
