-- request_timings_window(from, to): one row per gateway request that arrived in [from, to), its
-- engine timings filled from engine_requests where the gateway's copy of vLLM's per-request timing
-- object lacks them: request_facts_window's request and engine columns, by the same preferences,
-- without the application's records (no app_requests or app_traces to aggregate). The detector's
-- overload_queue and diagnose read requests with their engine timings through it.
--
-- Why a view rather than the same JOIN in each query: on a sharded schema (Distributed tables over
-- per-node local tables), a query joining the Distributed requests table with a parameterized view
-- is sent to the shards with the view's name and without its parameters, which the shards refuse
-- (ClickHouse 26.7's analyzer). The join belongs on each shard anyway, since a request's rows and
-- spans are on one shard: as a parameterized view it is run on every shard, with its parameters,
-- by the sharded schema's wrapper (internal/chstore, ParameterizedViews). Spans are read from a
-- minute before `from` to an hour after `to`, as request_facts_window reads them.
CREATE VIEW IF NOT EXISTS request_timings_window AS
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
    r.max_tokens                                                      AS max_tokens
FROM requests AS r FINAL
LEFT JOIN engine_requests(from = {from:DateTime64(6, 'UTC')} - INTERVAL 1 MINUTE,
                          to = {to:DateTime64(6, 'UTC')} + INTERVAL 1 HOUR) AS s ON s.request_id = r.request_id
WHERE r.arrival_ts >= {from:DateTime64(6, 'UTC')}
  AND r.arrival_ts < {to:DateTime64(6, 'UTC')};
