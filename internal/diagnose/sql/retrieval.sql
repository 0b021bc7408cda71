-- The application's top-passage retrieval scores of one window. Records that name no model are
-- kept under --model, since many applications do not set it.
SELECT count() AS n, quantileOrNull(0.5)(retrieval_top_score) AS top_p50
FROM app_records FINAL
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND retrieval_top_score IS NOT NULL
  AND ({model:String} = '' OR model = {model:String} OR model = '')
