-- Window averages from the engine's cumulative histograms (a window's average is the increase of
-- _sum over the increase of _count, each read before and after the window): per engine and metric,
-- the sum of the increases of _sum and _count between consecutive samples of the window, which
-- equals last − first when the engine did not restart. A drop in _count means the engine
-- restarted, and then the value after the drop is the increase since the restart. le1 is the same
-- increase of the bucket le = 1 (the observations ≤ 1): for vllm:request_generation_tokens, the
-- finished requests with at most one output token, for which vLLM observes a per-request TPOT of
-- 0 (vllm/v1/metrics/stats.py update_from_finished_request), so readers can leave them out.
SELECT name, sum(d_sum) AS sum, sum(d_count) AS count, sum(d_le1) AS le1
FROM
(
    SELECT name, rn,
           if(c >= pc, s - ps, s) AS d_sum,
           if(c >= pc, c - pc, c) AS d_count,
           if(c >= pc, l - pl, l) AS d_le1
    FROM
    (
        SELECT engine, name, ts,
               histogram_sum[name]                          AS s,
               histogram_count[name]                        AS c,
               arrayFirst(b -> b.le = 1, histogram_buckets[name]).count AS l,
               lagInFrame(histogram_sum[name]) OVER w       AS ps,
               lagInFrame(histogram_count[name]) OVER w     AS pc,
               lagInFrame(arrayFirst(b -> b.le = 1, histogram_buckets[name]).count) OVER w AS pl,
               row_number() OVER w                          AS rn
        FROM engine_samples FINAL
        ARRAY JOIN {names:Array(String)} AS name
        WHERE ts >= fromUnixTimestamp64Micro({from_us:Int64}, 'UTC')
          AND ts < fromUnixTimestamp64Micro({to_us:Int64}, 'UTC')
          AND up
          AND mapContains(histogram_count, name)
          AND ({model:String} = '' OR model = {model:String})
        WINDOW w AS (PARTITION BY engine, name ORDER BY ts ASC ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
    )
)
WHERE rn > 1
GROUP BY name
