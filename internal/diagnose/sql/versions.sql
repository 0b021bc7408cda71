-- Which system served the window: requests per model, prompt, config, index and embedding model
-- version, from the gateway's and the application's records together.
SELECT kv.1 AS kind, kv.2 AS value, uniqExact(request_id) AS n
FROM
(
    SELECT request_id,
           arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                      ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                      ('config_version', toString(config_version))]) AS kv
    FROM requests FINAL
    WHERE arrival_ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND arrival_ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR model = {model:String})
    UNION ALL
    SELECT request_id,
           arrayJoin([('model', toString(model)), ('embedding_model_version', toString(embedding_model_version)),
                      ('index_version', toString(index_version)), ('prompt_version', toString(prompt_version)),
                      ('config_version', toString(config_version))]) AS kv
    FROM app_records FINAL
    WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
      AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
      AND ({model:String} = '' OR model = {model:String} OR model = '')
)
WHERE value != ''
GROUP BY kind, value
ORDER BY kind, n DESC, value
