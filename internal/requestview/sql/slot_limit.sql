-- The engine's slot limit as its own log said it at start-up (vLLM prints its non-default
-- arguments, 'max_num_seqs': N, or its engine config, max_num_seqs=N): the latest such line in the
-- week before an instant.
SELECT ts, message
FROM engine_logs
WHERE engine = {engine:String}
  AND ts <= {at:DateTime64(6, 'UTC')} AND ts > {at:DateTime64(6, 'UTC')} - INTERVAL 7 DAY
  AND position(message, 'max_num_seqs') > 0
ORDER BY ts DESC
LIMIT 1
