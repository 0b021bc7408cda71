-- The rows retrieval.sql and hour_fill.sql read: the application's top-passage scores of the
-- range.
SELECT retrieval_top_score, ts
FROM app_records FINAL
WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
  AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
  AND retrieval_top_score IS NOT NULL
  AND ({model:String} = '' OR model = {model:String} OR model = '')
