-- Capacity headroom and cost (docs/slo.md defines each figure).
--
-- engine_config holds the detector's engines file (DETECTOR_ENGINES_FILE, services/detector/slo,
-- SyncEngines): a price per engine-hour and a slot limit (vLLM's --max-num-seqs) for an engine
-- (scope 'engine', name the collector's engine name), a model (scope 'model') or every other
-- engine (scope 'default', name ''). All rows of one load share loaded_at, and a row with scope
-- '' marks the load. Readers take the rows of the latest loaded_at and, for each engine, its own
-- row, else its model's, else the default's.
--
-- cost_window(from, to): what the engines cost over [from, to) and who it was for, per model:
--   engine_hours   the time each engine of the model was seen by the collector (10-second slots
--                  holding at least one sample, up or not: a GPU that is allocated costs), summed
--   idle_hours     the slots in which the engine ran and queued nothing (or did not answer)
--   cost           engine_hours x price per engine-hour (NULL when an engine has no price:
--                  unpriced_engine_hours says how many hours lack one)
--   rows (kind)    'requests', one per app: the busy cost (cost - idle cost) shared among the
--                  model's requests in proportion to the time each held a slot (E2E - queue wait),
--                  with requests, output tokens, cost_per_request and cost_per_mtok (per million
--                  output tokens). 'idle', the idle engines' cost, never spread over requests.
--                  And 'unattributed', the busy cost of a model whose engines ran requests the gateway
--                  did not see (they bypassed it)
--
-- capacity_window(from, to): per engine, how much more load it takes before requests queue, and
-- which limit comes first, from the window's own figures (the engine's /metrics histograms and
-- gauges) and Little's law (running = arrival rate x time holding a slot):
--   arrival_rps          requests the engine finished in the window, per second of the window its
--                        scrapes cover (its e2e_request_latency_seconds count: arrivals equal
--                        finishes while nothing queues)
--   inference_s          mean time a request held a slot (request_inference_time_seconds: prefill
--                        and decode), output_tokens the mean generated tokens
--   running_mean         the running gauge's mean, little_running = arrival_rps x inference_s (the
--                        two agree when the figures are consistent)
--   slot_limit           engine_config's max_num_seqs, else the one the engine's start-up log line
--                        gave (non-default args, engine config), else NULL, slot_limit_source says
--   kv_full_running      the running count at which the KV cache fills if each running request
--                        keeps the share it holds now (running_mean / kv_mean)
--   limit_running        the smaller of the two, limit 'slots' or 'kv' (which comes first)
--   tokens_per_step      the engine's mean tokens per step (iteration_tokens_total: prefill and
--                        decode), prompt_tokens the mean prompt tokens of a request
--   itl_intercept_s, itl_slope_s  the step time (inter-token latency) against the tokens per step,
--                        a weighted least-squares line through the engine's scrape intervals of the
--                        24 h before to whose steps are decode-dominated (their prefill tokens at most
--                        their decode tokens), weights the tokens generated, fitted only when
--                        the tokens per step seen span at least 8 (fit_tokens_min..max), else the
--                        slope is 0 and the prediction an upper bound (fit 'flat')
--   tokens_at_limit      the tokens of a step at the limit: limit_running decoding plus the prompts
--                        arriving meanwhile, limit_running x (1 + prompt_tokens / output_tokens)
--                        (by Little's law a running request stands for prompt/output prompt tokens
--                        a step, the prefix cache not deducted)
--   inference_at_limit_s inference_s + output_tokens x (step at the limit - step now): each of a
--                        request's steps (its prefill and its decode steps) slows as much
--   queue_at_rps         limit_running / inference_at_limit_s: the arrival rate at which requests
--                        start to queue, headroom_rps that minus arrival_rps
-- In a sharded schema these two views are created over the cluster-wide tables too (chstore's
-- MainViews), as each reads engines and requests that live on different shards.

CREATE TABLE IF NOT EXISTS engine_config
(
    loaded_at       DateTime64(6, 'UTC'),
    scope           LowCardinality(String),
    name            String,
    currency        String,
    price_per_hour  Nullable(Float64),
    max_num_seqs    Nullable(UInt32),
    source          String
)
ENGINE = MergeTree
ORDER BY (loaded_at, scope, name);

CREATE VIEW IF NOT EXISTS cost_window AS
WITH
    engines AS
    (
        SELECT
            e.engine                                                  AS engine,
            e.model                                                   AS model,
            e.engine_hours                                            AS engine_hours,
            e.idle_hours                                              AS idle_hours,
            coalesce(pe.price_per_hour, pm.price_per_hour, pd.price_per_hour) AS price,
            pd.currency                                               AS currency
        FROM
        (
            SELECT engine, anyIf(model, model != '') AS model, count() * 10 / 3600 AS engine_hours,
                   countIf(busy = 0) * 10 / 3600 AS idle_hours
            FROM
            (
                SELECT engine, anyIf(model, model != '') AS model, intDiv(toUnixTimestamp(ts), 10) AS slot,
                       max(if(up, coalesce(num_requests_running, 0) + coalesce(num_requests_waiting, 0), 0)) AS busy
                FROM engine_samples
                WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')}
                GROUP BY engine, slot
            )
            GROUP BY engine
        ) AS e
        LEFT JOIN
        (
            SELECT name, price_per_hour FROM engine_config
            WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config) AND scope = 'engine'
            LIMIT 1 BY name
        ) AS pe ON pe.name = e.engine
        LEFT JOIN
        (
            SELECT name, price_per_hour FROM engine_config
            WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config) AND scope = 'model'
            LIMIT 1 BY name
        ) AS pm ON pm.name = e.model
        CROSS JOIN
        (
            SELECT anyIf(price_per_hour, scope = 'default') AS price_per_hour,
                   if(anyIf(currency, currency != '') != '', anyIf(currency, currency != ''), 'USD') AS currency
            FROM engine_config
            WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config)
        ) AS pd
    ),
    models AS
    (
        SELECT
            model,
            any(currency)                                             AS currency,
            sum(engine_hours)                                         AS model_engine_hours,
            sum(idle_hours)                                           AS model_idle_hours,
            sumIf(engine_hours, price IS NULL)                        AS unpriced_engine_hours,
            if(unpriced_engine_hours > 0, NULL, sum(engine_hours * price)) AS cost,
            if(unpriced_engine_hours > 0, NULL, sum(idle_hours * price))   AS idle_cost
        FROM engines
        GROUP BY model
    ),
    apps AS
    (
        SELECT
            model,
            app,
            count()                                                   AS requests,
            sum(coalesce(completion_tokens, 0))                       AS output_tokens,
            sum(greatest(coalesce(e2e_s, 0) - coalesce(queue_s, 0), 0)) AS slot_s
        FROM requests FINAL
        WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}
        GROUP BY model, app
    ),
    totals AS
    (
        SELECT model, sum(slot_s) AS model_slot_s FROM apps GROUP BY model
    )
SELECT
    a.model                                                           AS model,
    a.app                                                             AS app,
    'requests'                                                        AS kind,
    m.currency                                                        AS currency,
    a.requests                                                        AS requests,
    a.output_tokens                                                   AS output_tokens,
    a.slot_s                                                          AS slot_s,
    m.model_engine_hours                                              AS engine_hours,
    m.model_idle_hours                                                AS idle_hours,
    m.unpriced_engine_hours                                           AS unpriced_engine_hours,
    if(t.model_slot_s > 0, (m.cost - m.idle_cost) * a.slot_s / t.model_slot_s,
       (m.cost - m.idle_cost) * a.requests / nullIf(sum(a.requests) OVER (PARTITION BY a.model), 0)) AS cost,
    cost / nullIf(a.requests, 0)                                      AS cost_per_request,
    cost / nullIf(a.output_tokens, 0) * 1000000                       AS cost_per_mtok
FROM apps AS a
INNER JOIN models AS m ON m.model = a.model
LEFT JOIN totals AS t ON t.model = a.model
UNION ALL
SELECT
    model, '' AS app, 'idle' AS kind, currency, 0 AS requests, 0 AS output_tokens, 0 AS slot_s,
    model_engine_hours AS engine_hours, model_idle_hours AS idle_hours, unpriced_engine_hours, idle_cost AS cost,
    CAST(NULL AS Nullable(Float64)) AS cost_per_request, CAST(NULL AS Nullable(Float64)) AS cost_per_mtok
FROM models
UNION ALL
SELECT
    model, '' AS app, 'unattributed' AS kind, currency, 0 AS requests, 0 AS output_tokens, 0 AS slot_s,
    model_engine_hours AS engine_hours, model_idle_hours AS idle_hours, unpriced_engine_hours, cost - idle_cost AS cost,
    CAST(NULL AS Nullable(Float64)) AS cost_per_request, CAST(NULL AS Nullable(Float64)) AS cost_per_mtok
FROM models
WHERE model NOT IN (SELECT model FROM apps);

CREATE VIEW IF NOT EXISTS capacity_window AS
WITH
    {from:DateTime64(6, 'UTC')} AS w_from,
    {to:DateTime64(6, 'UTC')} AS w_to
SELECT
    g.engine                                                          AS engine,
    g.model                                                           AS model,
    w_from                                                            AS window_start,
    w_to                                                              AS window_end,
    h.finished                                                        AS finished,
    h.finished / greatest(dateDiff('microsecond', greatest(h.first_ts, w_from), h.last_ts) / 1e6, 1e-6) AS arrival_rps,
    h.e2e_s                                                           AS e2e_s,
    h.queue_s                                                         AS queue_s,
    coalesce(h.inference_s, h.e2e_s - coalesce(h.queue_s, 0))         AS inference_s,
    h.output_tokens                                                   AS output_tokens,
    h.itl_s                                                           AS itl_s,
    h.tokens_per_step                                                 AS tokens_per_step,
    h.prompt_tokens                                                   AS prompt_tokens,
    g.running_mean                                                    AS running_mean,
    g.running_max                                                     AS running_max,
    g.waiting_max                                                     AS waiting_max,
    g.kv_mean                                                         AS kv_mean,
    arrival_rps * inference_s                                         AS little_running,
    coalesce(sc.max_num_seqs, sm.max_num_seqs, sd.max_num_seqs, lg.max_num_seqs) AS slot_limit,
    multiIf(sc.max_num_seqs IS NOT NULL, 'engine_config (engine)', sm.max_num_seqs IS NOT NULL, 'engine_config (model)',
            sd.max_num_seqs IS NOT NULL, 'engine_config (default)', lg.max_num_seqs IS NOT NULL, 'engine log', '') AS slot_limit_source,
    if(g.kv_mean > 0 AND g.running_mean > 0, g.running_mean / g.kv_mean, NULL) AS kv_full_running,
    multiIf(slot_limit IS NULL AND kv_full_running IS NULL, NULL,
            slot_limit IS NULL, kv_full_running,
            kv_full_running IS NULL, toFloat64(slot_limit),
            least(toFloat64(slot_limit), kv_full_running))            AS limit_running,
    multiIf(limit_running IS NULL, '', slot_limit IS NULL, 'kv', kv_full_running IS NULL OR slot_limit <= kv_full_running, 'slots', 'kv') AS limit,
    f.intervals                                                       AS fit_intervals,
    if(f.intervals > 0, f.x_min, NULL)                                AS fit_tokens_min,
    if(f.intervals > 0, f.x_max, NULL)                                AS fit_tokens_max,
    f.usable                                                          AS fit_usable,
    if(f.usable = 1, 'line', 'flat')                                  AS fit,
    if(f.usable = 1, f.intercept, h.itl_s)                            AS itl_intercept_s,
    if(f.usable = 1, f.slope, 0)                                      AS itl_slope_s,
    limit_running * (1 + coalesce(h.prompt_tokens, 0) / greatest(coalesce(h.output_tokens, 1), 1)) AS tokens_at_limit,
    itl_intercept_s + itl_slope_s * tokens_at_limit                   AS itl_at_limit_s,
    itl_intercept_s + itl_slope_s * coalesce(h.tokens_per_step, 0)    AS itl_now_fit_s,
    inference_s + coalesce(h.output_tokens, 1) * greatest(itl_at_limit_s - itl_now_fit_s, 0) AS inference_at_limit_s,
    limit_running / nullIf(inference_at_limit_s, 0)                   AS queue_at_rps,
    queue_at_rps - arrival_rps                                        AS headroom_rps
FROM
(
    SELECT
        engine,
        anyIf(model, model != '')                                     AS model,
        avgIf(num_requests_running, up)                               AS running_mean,
        maxIf(num_requests_running, up)                               AS running_max,
        maxIf(num_requests_waiting, up)                               AS waiting_max,
        avgIf(kv_cache_usage_perc, up AND num_requests_running > 0)   AS kv_mean_busy,
        -- the KV share at the mean running count: the busy samples' KV scaled to it
        if(avgIf(num_requests_running, up AND num_requests_running > 0) > 0,
           kv_mean_busy * running_mean / avgIf(num_requests_running, up AND num_requests_running > 0), NULL) AS kv_mean
    FROM engine_samples
    WHERE ts >= {from:DateTime64(6, 'UTC')} AND ts < {to:DateTime64(6, 'UTC')}
    GROUP BY engine
) AS g
LEFT JOIN
(
    SELECT
        engine,
        anyIf(toNullable(count_increase), metric = 'e2e_request_latency_seconds') AS finished,
        anyIf(first_ts, metric = 'e2e_request_latency_seconds')       AS first_ts,
        anyIf(last_ts, metric = 'e2e_request_latency_seconds')        AS last_ts,
        anyIf(average, metric = 'e2e_request_latency_seconds')        AS e2e_s,
        anyIf(average, metric = 'request_queue_time_seconds')         AS queue_s,
        anyIf(average, metric = 'request_inference_time_seconds')     AS inference_s,
        anyIf(average, metric = 'request_generation_tokens')          AS output_tokens,
        anyIf(average, metric = 'inter_token_latency_seconds')        AS itl_s,
        anyIf(average, metric = 'iteration_tokens_total')             AS tokens_per_step,
        anyIf(average, metric = 'request_prompt_tokens')              AS prompt_tokens
    FROM engine_window_histograms(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
    GROUP BY engine
) AS h ON h.engine = g.engine
LEFT JOIN
(
    SELECT
        engine,
        count()                                                       AS intervals,
        min(x)                                                        AS x_min,
        max(x)                                                        AS x_max,
        sum(w) AS sw, sum(w * x) AS sx, sum(w * y) AS sy, sum(w * x * x) AS sxx, sum(w * x * y) AS sxy,
        (sw * sxy - sx * sy) / nullIf(sw * sxx - sx * sx, 0)          AS slope,
        (sy - coalesce(slope, 0) * sx) / nullIf(sw, 0)                AS intercept,
        toUInt8(x_max - x_min >= 8 AND slope IS NOT NULL AND slope >= 0) AS usable
    FROM
    (
        SELECT
            engine,
            dc AS w,
            ds / dc AS y,
            tsum / tc AS x
        FROM
        (
            SELECT
                engine,
                row_number() OVER p AS n,
                histogram_count['inter_token_latency_seconds'] - lagInFrame(histogram_count['inter_token_latency_seconds']) OVER p AS dc,
                histogram_sum['inter_token_latency_seconds'] - lagInFrame(histogram_sum['inter_token_latency_seconds']) OVER p AS ds,
                histogram_count['iteration_tokens_total'] - lagInFrame(histogram_count['iteration_tokens_total']) OVER p AS tc,
                histogram_sum['iteration_tokens_total'] - lagInFrame(histogram_sum['iteration_tokens_total']) OVER p AS tsum,
                counters['generation_tokens_total'] - lagInFrame(counters['generation_tokens_total']) OVER p AS dg
            FROM engine_samples
            WHERE up AND ts >= {to:DateTime64(6, 'UTC')} - INTERVAL 24 HOUR AND ts < {to:DateTime64(6, 'UTC')}
              AND mapContains(histogram_count, 'inter_token_latency_seconds')
              AND mapContains(histogram_count, 'iteration_tokens_total')
            WINDOW p AS (PARTITION BY engine ORDER BY ts ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
        )
        WHERE n > 1 AND dc > 0 AND ds > 0 AND tc > 0 AND tsum > 0
          -- Decode-dominated intervals only: a step's prefill at most its decode tokens (+1). An
          -- interval holding a long prompt's prefill chunks has a few decode tokens waiting on them,
          -- too few to say what the step costs (an engine without the counter keeps every interval).
          AND (dg <= 0 OR tsum / tc <= 2 * dg / tc + 1)
    )
    GROUP BY engine
) AS f ON f.engine = g.engine
LEFT JOIN
(
    SELECT name, max_num_seqs FROM engine_config
    WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config) AND scope = 'engine' AND max_num_seqs IS NOT NULL
    LIMIT 1 BY name
) AS sc ON sc.name = g.engine
LEFT JOIN
(
    SELECT name, max_num_seqs FROM engine_config
    WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config) AND scope = 'model' AND max_num_seqs IS NOT NULL
    LIMIT 1 BY name
) AS sm ON sm.name = g.model
CROSS JOIN
(
    SELECT anyIf(max_num_seqs, scope = 'default') AS max_num_seqs FROM engine_config
    WHERE loaded_at = (SELECT max(loaded_at) FROM engine_config)
) AS sd
LEFT JOIN
(
    -- The slot limit the engine's latest start-up line in the 30 days before to names.
    SELECT engine, toUInt32OrNull(argMax(extract(message, '(?:''max_num_seqs'': |max_num_seqs=)([0-9]+)'), ts)) AS max_num_seqs
    FROM engine_logs
    WHERE ts > {to:DateTime64(6, 'UTC')} - INTERVAL 30 DAY AND ts <= {to:DateTime64(6, 'UTC')}
      AND match(message, '(?:''max_num_seqs'': |max_num_seqs=)[0-9]+')
    GROUP BY engine
) AS lg ON lg.engine = g.engine;
