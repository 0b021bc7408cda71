-- The detector's alerts as annotations: one region per episode that fired (an alert's rows share
-- its active_at from pending to resolved), from its firing to its resolution, or to now while it
-- fires, with the rule, severity and summary; tags are the rule and the severity. Episodes of the
-- dashboard's model, app and engine (an alert without that label concerns all of them).
SELECT
    minIf(ts, state = 'firing')                                                        AS time,
    if(countIf(state = 'resolved') > 0, maxIf(ts, state = 'resolved'), now64(6))       AS timeEnd,
    concat(toString(rule), ' (', argMax(toString(severity), ts), '): ',
           argMaxIf(annotations['summary'], ts, state = 'firing'),
           if(countIf(state = 'resolved') > 0, ' - resolved', ' - firing'))             AS text,
    concat(toString(rule), ',', argMax(toString(severity), ts))                         AS tags
FROM alerts
WHERE ts >= $__fromTime - INTERVAL 1 DAY AND ts <= $__toTime
  AND state IN ('firing', 'resolved')
  AND (${model:sqlstring} = '' OR labels['model'] IN ('', ${model:sqlstring}))
  AND (${app:sqlstring} = '' OR labels['app'] IN ('', ${app:sqlstring}))
  AND (${engine:sqlstring} = '' OR labels['engine'] IN ('', ${engine:sqlstring}))
GROUP BY rule, fingerprint, active_at
HAVING countIf(state = 'firing') > 0 AND timeEnd >= $__fromTime
ORDER BY time
