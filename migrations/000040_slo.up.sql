-- Service levels: the objectives of the SLO files, one judgement of every request against them,
-- goodput and the error budget (docs/slo.md defines each figure).
--
-- slo_objectives holds the SLO files the detector loaded (services/detector/slo, Sync): one row
-- per SLO of each load, all rows of one load sharing loaded_at, plus a row with slo = '' that
-- marks the load (so that a load with no SLO still replaces the one before). Readers take the
-- rows of the latest loaded_at, one per SLO (a load written twice, to two replicas of a shard, is
-- still one). Thresholds are seconds, targets shares (0.995), NULL where the
-- SLO has no such objective. page_long_s and page_factor are the first window pair of the SLO's
-- page rule (NULL without one), for the error-budget panel.
--
-- slo_requests_window(from, to): one row per request that arrived in [from, to) and per SLO whose
-- selector (model, app, endpoint: '' matches every value, stream: NULL matches both) picks it,
-- judged as docs/slo.md says:
--   aborted        the client left first (error_layer client, 499)
--   client_error   any other 4xx but 429: the request was wrong, not judged
--   failed         5xx, 429, or a 2xx whose stream broke or carried the engine's error (error_layer
--                  upstream or gateway), not aborted
--   slo_ttft_s     a stream's TTFT as the gateway measured it (arrival to the first token), the
--                  E2E of a body (its first token reaches the client with the whole answer), as
--                  vllm bench serve counts a request without a stream
--   slo_tpot_s     (E2E - TTFT) / (output tokens per choice - 1) of a stream, as vllm bench serve
--                  computes TPOT from its client's latency and TTFT, 0 for a body or an answer of
--                  one token per choice (vllm/benchmarks/serve.py, calculate_metrics)
--   slo_e2e_s      the gateway's E2E, arrival to the last byte
--   X_judged, X_bad for each objective X (availability, ttft, tpot, e2e): whether the request
--                  counts for X and misses it (a latency above its threshold: equal is met, as
--                  vllm bench serve's is_good_req compares). Failed requests count for
--                  availability only, client errors for none. An aborted request counts only
--                  where the abort already decided: a TTFT or E2E objective whose threshold had
--                  passed without the first token or the answer (a miss), a TTFT measured before it
--   judged, good   for goodput: a request counts unless it is a client error or an undecided
--                  abort, and is good when it failed no objective of its SLO and did not fail
-- Requests are read with FINAL. A request is judged once it finished (the gateway's row).
--
-- slo_goodput(from, to): per SLO, model and app, the requests judged and good in [from, to),
-- goodput (good / judged) and goodput_rps (good requests a second over the range, vllm bench
-- serve's request_goodput), and each objective's judged and bad counts.
--
-- slo_error_budget(from, to): per SLO and objective, with [from, to) as the period (pass
-- to - period_s as from for the SLO's own): the requests judged and bad, budget_left (1 - the
-- bad share over the budget, 1 - target: 1 untouched, 0 spent, below 0 overspent), the burn rate
-- over the last hour before to (the bad share over the budget: 1 spends the budget exactly in the
-- period) and exhausted_in_s, how long the budget left lasts at that rate (NULL at rate 0).
--
-- In a sharded schema each shard judges its own requests: the two aggregating views answer one
-- row per shard and group, whose counts add up (sum them before dividing).

CREATE TABLE IF NOT EXISTS slo_objectives
(
    loaded_at            DateTime64(6, 'UTC'),
    slo                  String,
    source               String,
    model                String,
    app                  String,
    endpoint             String,
    stream               Nullable(Bool),
    period_s             UInt32,
    availability_target  Nullable(Float64),
    ttft_threshold_s     Nullable(Float64),
    ttft_target          Nullable(Float64),
    tpot_threshold_s     Nullable(Float64),
    tpot_target          Nullable(Float64),
    e2e_threshold_s      Nullable(Float64),
    e2e_target           Nullable(Float64),
    page_long_s          Nullable(UInt32),
    page_factor          Nullable(Float64)
)
ENGINE = MergeTree
ORDER BY (loaded_at, slo);

CREATE VIEW IF NOT EXISTS slo_requests_window AS
SELECT
    r.request_id                                                      AS request_id,
    r.arrival_ts                                                      AS arrival_ts,
    r.finished_ts                                                     AS finished_ts,
    o.slo                                                             AS slo,
    r.model                                                           AS model,
    r.app                                                             AS app,
    r.endpoint                                                        AS endpoint,
    r.stream                                                          AS stream,
    r.status_code                                                     AS status_code,
    r.error_layer                                                     AS error_layer,
    toUInt8(r.error_layer = 'client' OR r.status_code = 499)          AS aborted,
    toUInt8(NOT aborted AND r.status_code BETWEEN 400 AND 499 AND r.status_code != 429) AS client_error,
    toUInt8(NOT aborted AND (r.status_code >= 500 OR r.status_code = 429
        OR (r.status_code < 400 AND r.error_layer IN ('upstream', 'gateway')))) AS failed,
    if(r.stream AND r.ttft_s IS NOT NULL, r.ttft_s, coalesce(r.e2e_s, 0)) AS slo_ttft_s,
    coalesce(r.completion_tokens, 0) / greatest(length(r.finish_reasons), 1) AS tokens_per_choice,
    if(r.stream AND r.ttft_s IS NOT NULL AND tokens_per_choice > 1,
       greatest(coalesce(r.e2e_s, 0) - r.ttft_s, 0) / (tokens_per_choice - 1), 0) AS slo_tpot_s,
    coalesce(r.e2e_s, 0)                                              AS slo_e2e_s,
    o.period_s                                                        AS period_s,
    o.availability_target                                             AS availability_target,
    o.ttft_threshold_s                                                AS ttft_threshold_s,
    o.ttft_target                                                     AS ttft_target,
    o.tpot_threshold_s                                                AS tpot_threshold_s,
    o.tpot_target                                                     AS tpot_target,
    o.e2e_threshold_s                                                 AS e2e_threshold_s,
    o.e2e_target                                                      AS e2e_target,
    o.page_long_s                                                     AS page_long_s,
    o.page_factor                                                     AS page_factor,
    toUInt8(availability_target IS NOT NULL AND NOT client_error AND NOT aborted) AS availability_judged,
    toUInt8(availability_judged AND failed)                           AS availability_bad,
    toUInt8(ttft_threshold_s IS NOT NULL AND NOT client_error AND NOT failed
        AND ifNull(NOT aborted OR (r.stream AND r.ttft_s IS NOT NULL) OR slo_ttft_s > ttft_threshold_s, 0)) AS ttft_judged,
    toUInt8(ttft_judged AND ifNull(slo_ttft_s > ttft_threshold_s, 0))  AS ttft_bad,
    toUInt8(tpot_threshold_s IS NOT NULL AND NOT client_error AND NOT failed AND NOT aborted) AS tpot_judged,
    toUInt8(tpot_judged AND ifNull(slo_tpot_s > tpot_threshold_s, 0))  AS tpot_bad,
    toUInt8(e2e_threshold_s IS NOT NULL AND NOT client_error AND NOT failed
        AND ifNull(NOT aborted OR slo_e2e_s > e2e_threshold_s, 0))    AS e2e_judged,
    toUInt8(e2e_judged AND ifNull(slo_e2e_s > e2e_threshold_s, 0))    AS e2e_bad,
    toUInt8(NOT client_error AND (NOT aborted OR ttft_bad OR e2e_bad)) AS judged,
    toUInt8(judged AND NOT aborted AND NOT failed AND NOT ttft_bad AND NOT tpot_bad AND NOT e2e_bad) AS good
FROM requests AS r FINAL
CROSS JOIN
(
    SELECT * FROM slo_objectives
    WHERE loaded_at = (SELECT max(loaded_at) FROM slo_objectives) AND slo != ''
    LIMIT 1 BY slo
) AS o
WHERE r.arrival_ts >= {from:DateTime64(6, 'UTC')}
  AND r.arrival_ts < {to:DateTime64(6, 'UTC')}
  AND (o.model = '' OR o.model = r.model)
  AND (o.app = '' OR o.app = r.app)
  AND (o.endpoint = '' OR o.endpoint = r.endpoint)
  AND (o.stream IS NULL OR o.stream = r.stream);

CREATE VIEW IF NOT EXISTS slo_goodput AS
SELECT
    slo,
    model,
    app,
    dateDiff('microsecond', {from:DateTime64(6, 'UTC')}, {to:DateTime64(6, 'UTC')}) / 1e6 AS seconds,
    countIf(judged = 1)                                               AS judged,
    countIf(good = 1)                                                 AS good,
    if(judged > 0, good / judged, NULL)                               AS goodput,
    good / seconds                                                    AS goodput_rps,
    countIf(availability_judged = 1)                                  AS availability_judged,
    countIf(availability_bad = 1)                                     AS availability_bad,
    countIf(ttft_judged = 1)                                          AS ttft_judged,
    countIf(ttft_bad = 1)                                             AS ttft_bad,
    countIf(tpot_judged = 1)                                          AS tpot_judged,
    countIf(tpot_bad = 1)                                             AS tpot_bad,
    countIf(e2e_judged = 1)                                           AS e2e_judged,
    countIf(e2e_bad = 1)                                              AS e2e_bad
FROM slo_requests_window(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
GROUP BY slo, model, app;

CREATE VIEW IF NOT EXISTS slo_error_budget AS
SELECT
    slo,
    objective,
    target,
    period_s,
    sum(j)                                                            AS judged,
    sum(b)                                                            AS bad,
    if(judged > 0, 1 - (bad / judged) / (1 - target), NULL)           AS budget_left,
    sumIf(j, last_hour)                                               AS judged_1h,
    sumIf(b, last_hour)                                               AS bad_1h,
    if(judged_1h > 0, (bad_1h / judged_1h) / (1 - target), NULL)      AS burn_rate_1h,
    if(burn_rate_1h > 0, greatest(budget_left, 0) * period_s / burn_rate_1h, NULL) AS exhausted_in_s
FROM
(
    SELECT
        slo,
        period_s,
        arrival_ts > {to:DateTime64(6, 'UTC')} - INTERVAL 1 HOUR     AS last_hour,
        arrayJoin([
            ('availability', availability_judged, availability_bad, availability_target),
            ('ttft', ttft_judged, ttft_bad, ttft_target),
            ('tpot', tpot_judged, tpot_bad, tpot_target),
            ('e2e', e2e_judged, e2e_bad, e2e_target)
        ])                                                            AS x,
        x.1                                                           AS objective,
        x.2                                                           AS j,
        x.3                                                           AS b,
        assumeNotNull(x.4)                                            AS target
    FROM slo_requests_window(from = {from:DateTime64(6, 'UTC')}, to = {to:DateTime64(6, 'UTC')})
    WHERE x.4 IS NOT NULL
)
GROUP BY slo, objective, target, period_s;
