-- Preemptions in one window: vLLM preempts a running request (frees its KV blocks, recomputes it
-- later) exactly when a running request needs a KV block and none is free, so this is the direct
-- sign of KV pressure. From vllm:num_preemptions_total (every release: V1
-- vllm/v1/metrics/loggers.py, V0 vllm/engine/metrics.py): per engine the increases between
-- consecutive samples of the window, a drop read as a restart (the value after it is the increase),
-- summed over engines. NULL when no engine exposed the counter. From the log, what main's stats
-- lines say ("Preemptions: N", printed only when N > 0, so a line without it says 0 only on main):
-- the per-engine lines' sum, or the aggregated lines' when the log has only those.
SELECT
    (SELECT sumOrNull(if(c >= pc, c - pc, c))
     FROM
     (
         SELECT counters['num_preemptions_total']                   AS c,
                lagInFrame(counters['num_preemptions_total']) OVER w AS pc,
                row_number() OVER w                                 AS rn
         FROM engine_samples FINAL
         WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
           AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
           AND up
           AND mapContains(counters, 'num_preemptions_total')
           AND ({model:String} = '' OR model = {model:String})
         WINDOW w AS (PARTITION BY engine ORDER BY ts ASC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
     )
     WHERE rn > 1)                                                   AS from_samples,
    (SELECT toNullable(toFloat64(if(countIf(engines = 1) > 0,
                                    sumIf(preemptions, engines = 1),
                                    sumIf(preemptions, engines > 1))))
     FROM engine_logs FINAL
     WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
       AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
       AND preemptions IS NOT NULL)                                  AS from_logs
