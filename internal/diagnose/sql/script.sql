-- Share of answers with letters outside the allowed scripts, per request: the gateway's check
-- and the application's check are merged, and either one finding a violation counts.
SELECT count() AS checked, countIf(violation) AS violations
FROM
(
    SELECT request_id, max(v) AS violation
    FROM
    (
        SELECT request_id, assumeNotNull(output_script_violation) AS v
        FROM requests FINAL
        WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND output_script_violation IS NOT NULL
          AND ({model:String} = '' OR model = {model:String})
        UNION ALL
        SELECT request_id, assumeNotNull(output_script_violation) AS v
        FROM app_records FINAL
        WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND output_script_violation IS NOT NULL
          AND ({model:String} = '' OR model = {model:String} OR model = '')
    )
    GROUP BY request_id
)
