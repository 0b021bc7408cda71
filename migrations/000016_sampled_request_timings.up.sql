-- Per-request timings at a bounded cost: request_timings_sampled(from, to) and
-- request_phases_sampled(from, to).
--
-- request_timings_window joins every request of [from, to) with engine_requests, whose two
-- GROUP BYs run over every span of the period: at 3.3 M requests a day, a 24 h baseline is a
-- 3.3 M x 3.3 M join and two GROUP BYs of 3.3 M string keys (26 s of server CPU, 1.6 GiB,
-- measured on the month's generated history, docs/performance.md, "At production shape"). Means,
-- shares and quantiles of a large uniform sample of requests differ from the whole period's by far
-- less than any rule's margin, so above a bound these views read a deterministic sample:
--
--   arrived        the requests that arrived in [from, to), counted without FINAL (a re-delivered
--                  event counts twice here, which only moves the bound)
--   sample_factor  1 while arrived < 100,000: every request, the same rows as
--                  request_timings_window. Above, the power of two m for which arrived / m lies
--                  in [50,000, 100,000): each row stands for m requests
--   the sample     the requests with xxh3(request_id) % m = 0, on both sides of the join: the
--                  requests' rows (PREWHERE, before FINAL: duplicates of one event share their
--                  request_id, so they are kept or dropped together) and the engine spans (the
--                  filter is on engine_requests' GROUP BY key, so ClickHouse pushes it below both
--                  GROUP BYs into the spans' scan). All children and duplicates of a sampled request
--                  are in the sample, so its row is the one request_timings_window gives.
--
-- Why xxh3 and not cityHash64: a sharded schema places rows by cityHash64(request_id)
-- (internal/chstore/cluster.go), and cityHash64(request_id) % m = 0 with m a power of two would
-- pick the requests of some shards only. Why powers of two: the sample at 2m is a subset of the sample at
-- m, so a period whose count crosses a bound keeps half of the same requests.
--
-- Readers weight by sample_factor: counts are sum(sample_factor) (estimates above the bound: an
-- exact count reads requests alone), shares sumIf(sample_factor, c) / sum(sample_factor), means
-- avgWeighted(x, sample_factor). With sample_factor 1 these are the exact figures. On a sharded
-- schema each shard runs the view on its own rows (the wrappers of internal/chstore), counts its
-- own arrivals and may pick another m than its neighbour: the weights keep shares and means right.
--
-- The views take only from and to, as every parameterized view of the schema, so that the sharded
-- schema's wrappers run them unchanged. Spans are read from a minute before `from` to an hour
-- after `to`, application records an hour either side, as request_facts_window reads them.

CREATE VIEW IF NOT EXISTS request_timings_sampled AS
WITH
    -- A scalar subquery is Nullable when the view runs and was not when it was created:
    -- coalesce keeps the column's type the view's structure says.
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT
    r.request_id                                                      AS request_id,
    r.arrival_ts                                                      AS arrival_ts,
    r.finished_ts                                                     AS finished_ts,
    r.model                                                           AS model,
    r.status_code                                                     AS status_code,
    coalesce(r.queue_s, s.queue_s)                                    AS queue_s,
    coalesce(r.prefill_s, s.prefill_s)                                AS prefill_s,
    coalesce(r.decode_s, s.decode_s)                                  AS decode_s,
    multiIf(r.ttft_s IS NOT NULL, r.ttft_s,
            s.ttft_s IS NOT NULL, s.ttft_s,
            r.queue_s + r.scheduled_to_first_token_s)                 AS ttft_s,
    r.tpot_s                                                          AS tpot_s,
    r.engine_itl_s                                                    AS engine_itl_s,
    s.tpot_s                                                          AS engine_tpot_s,
    r.e2e_s                                                           AS e2e_s,
    s.e2e_s                                                           AS engine_e2e_s,
    coalesce(r.prompt_tokens, s.prompt_tokens)                        AS prompt_tokens,
    coalesce(r.completion_tokens, s.completion_tokens)                AS completion_tokens,
    r.cached_tokens                                                   AS cached_tokens,
    r.finish_reason                                                   AS finish_reason,
    r.max_tokens                                                      AS max_tokens,
    r.app                                                             AS request_app,
    r.trace_id                                                        AS trace_id,
    s.engine                                                          AS engine,
    -- Float64, as ClickHouse's own _sample_factor: avgWeighted sums value × weight in the
    -- weight's type, and an integer weight would truncate every duration to whole seconds.
    toFloat64(sample_m)                                               AS sample_factor
FROM
(
    SELECT request_id, arrival_ts, finished_ts, model, status_code, queue_s, prefill_s, decode_s,
           ttft_s, scheduled_to_first_token_s, tpot_s, engine_itl_s, e2e_s, prompt_tokens,
           completion_tokens, cached_tokens, finish_reason, max_tokens, app, trace_id
    FROM requests FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE arrival_ts >= {from:DateTime64(6, 'UTC')}
      AND arrival_ts < {to:DateTime64(6, 'UTC')}
) AS r
LEFT JOIN
(
    SELECT *
    FROM engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                         to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR)
    WHERE xxh3(request_id) % sample_m = 0
    -- Filter the spans before FINAL merges them, not after: the merge then sees 1/m of the rows
    -- (measured on a day of 3.5 M spans: half the CPU). Correct here, where it is not in general:
    -- the filter reads only ts and request_id, which every copy of one event shares, so a
    -- de-duplicated event's copies pass or fail it together.
    SETTINGS optimize_move_to_prewhere_if_final = 1
) AS s ON s.request_id = r.request_id;

-- request_phases_sampled(from, to): request_timings_sampled's rows with the application each
-- request is for, `app`, as request_facts_window resolves it: the request's own app header, else
-- the latest app named by the application's records of its request_id, else by those of its trace
-- id. Only that one field of the records is aggregated (request_facts_window aggregates some twenty
-- for its app_requests and app_traces), over the sample's requests and traces only. The console's
-- phases and queue panels read it.
CREATE VIEW IF NOT EXISTS request_phases_sampled AS
WITH
    -- A scalar subquery is Nullable when the view runs and was not when it was created:
    -- coalesce keeps the column's type the view's structure says.
    coalesce((SELECT count() FROM requests
              WHERE arrival_ts >= {from:DateTime64(6, 'UTC')} AND arrival_ts < {to:DateTime64(6, 'UTC')}), 0) AS arrived,
    toUInt64(if(arrived < 100000, 1, intExp2(toUInt8(log2(arrived / 50000))))) AS sample_m
SELECT
    t.request_id                                                      AS request_id,
    t.* EXCEPT (request_id, trace_id),
    t.trace_id                                                        AS trace_id,
    if(t.request_app != '', t.request_app,
       if(coalesce(a.app_records, toUInt64(0)) > 0, a.record_app, b.record_app)) AS app
FROM request_timings_sampled(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')}) AS t
LEFT JOIN
(
    -- The result is not named app: that name would hide the column inside argMaxIf.
    SELECT request_id, count() AS app_records, argMaxIf(app, ts, app != '') AS record_app
    FROM app_records FINAL
    PREWHERE xxh3(request_id) % sample_m = 0
    WHERE ts >= {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
      AND ts < {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR
    GROUP BY request_id
) AS a ON a.request_id = t.request_id
LEFT JOIN
(
    SELECT trace_id, argMaxIf(app, ts, app != '') AS record_app
    FROM app_records FINAL
    WHERE ts >= {from:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR
      AND ts < {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR
      AND trace_id != ''
      AND trace_id IN (SELECT trace_id FROM requests
                       PREWHERE xxh3(request_id) % sample_m = 0
                       WHERE arrival_ts >= {from:DateTime64(6, 'UTC')}
                         AND arrival_ts < {to:DateTime64(6, 'UTC')}
                         AND trace_id != '')
    GROUP BY trace_id
) AS b ON b.trace_id = t.trace_id;
