-- The requests an engine death caught: those in flight when it died (arrived in the hour before,
-- ended at or after it, a second of clock slack) that failed at the engine's layer (a 5xx, or an
-- upstream error such as a stream broken after its 200), and those that started before it and
-- never finished. The engine's name is not the gateway's upstream URL, so on a gateway with
-- several engines the failures of one death are told from another's by their time only.
SELECT request_id, arrival_ts, finished, finished_ts, model, status_code, response_id, trace_id, 'request_id'
FROM
(
    SELECT request_id, arrival_ts, true AS finished, toNullable(finished_ts) AS finished_ts, toString(model) AS model,
           toNullable(status_code) AS status_code, response_id, trace_id
    FROM requests
    WHERE arrival_ts >= {death:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
      AND arrival_ts <= {death:DateTime64(6, 'UTC')} + INTERVAL 1 SECOND
      AND finished_ts >= {death:DateTime64(6, 'UTC')} - INTERVAL 1 SECOND
      AND (status_code >= 500 OR error_layer = 'upstream')
    UNION ALL
    SELECT request_id, arrival_ts, false, CAST(NULL AS Nullable(DateTime64(6, 'UTC'))), toString(model),
           CAST(NULL AS Nullable(UInt16)), '', trace_id
    FROM requests_started
    WHERE arrival_ts >= {death:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
      AND arrival_ts <= {death:DateTime64(6, 'UTC')}
      AND (request_id, arrival_ts) NOT IN (SELECT request_id, arrival_ts FROM requests
                                           WHERE arrival_ts >= {death:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
                                             AND arrival_ts <= {death:DateTime64(6, 'UTC')})
)
ORDER BY arrival_ts DESC, finished DESC
LIMIT 1 BY request_id, arrival_ts
LIMIT {limit:UInt32}
