-- The model served around the death, from the engines' metric samples, for the vocabulary size.
-- The log's engine name need not equal the scrape target's, so only an unambiguous answer (one
-- model in the day before) is used.
SELECT if(uniqExact(model) = 1, any(model), '')
FROM engine_samples
WHERE model != ''
  AND ts >= fromUnixTimestamp64Micro({to_us:Int64}, 'UTC') - INTERVAL 1 DAY
  AND ts <= fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
