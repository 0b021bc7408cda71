-- Requests that started in one window (the gateway's request.started, requests_started) before
-- its last grace_us, and those of them not answered by the window's end (no requests row, or one
-- finished after it): the reference's "unfinished requests over time". With a true dot, per
-- window of the range (window_key.sql), each window's end being its own.
SELECT
{{- if .}}
    k,
{{- end}}
    countIf(a < e - {grace_us:Int64})                       AS started,
    countIf(a < e - {grace_us:Int64} AND (f = 0 OR f > e))  AS unfinished
FROM
(
    SELECT
{{- if .}}
        {{template "window_key.sql" "started_ts"}}          AS k,
        {from_us:Int64} + k * {hop_us:Int64} + {win_us:Int64} AS e,
{{- else}}
        {to_us:Int64}                                       AS e,
{{- end}}
        toUnixTimestamp64Micro(started_ts)                  AS a,
        f
    FROM
    (
        SELECT s.started_ts AS started_ts, toUnixTimestamp64Micro(f.fin_ts) AS f
        FROM
        (
            SELECT request_id, min(arrival_ts) AS started_ts
            FROM requests_started
            WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
              AND ({model:String} = '' OR model = {model:String})
            GROUP BY request_id
        ) AS s
        LEFT JOIN
        (
            -- A request not in requests reads the default fin_ts, the epoch: f = 0.
            SELECT request_id, min(finished_ts) AS fin_ts
            FROM requests
            WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
              AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
            GROUP BY request_id
        ) AS f USING (request_id)
    )
)
{{- if .}}
GROUP BY k
{{- end}}
