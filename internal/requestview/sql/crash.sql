-- The first fatal line (an out-of-memory size or an exception, as servescope postmortem finds a
-- death: internal/postmortem/sql/death.sql) of the named engine (or any) in [from, to].
SELECT toString(engine), ts
FROM engine_logs FINAL
WHERE (oom_bytes_requested IS NOT NULL OR exception_type != '')
  AND level IN ('', 'ERROR', 'CRITICAL')
  AND ({engine:String} = '' OR engine = {engine:String})
  AND ts >= {from:DateTime64(6, 'UTC')} AND ts <= {to:DateTime64(6, 'UTC')}
ORDER BY ts
LIMIT 1
