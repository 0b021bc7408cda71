package sink

import (
	"time"

	"github.com/servescope/servescope/schema"
)

// table is one landing table of migrations/000001_tables.up.sql: the columns the consumer writes,
// in insert order, and how one event becomes one row of them. ingested_at is left to its DEFAULT.
type table struct {
	name    string
	columns []string
	// row appends the event's values, one per column in order, to dst. The event is of the
	// table's kind; the caller guarantees it.
	row func(dst []any, e schema.Event) []any
}

// Table names, one per event kind, as created by migration 000001 (gateway_heartbeats: 000030).
const (
	TableRequestsStarted   = "requests_started"
	TableRequests          = "requests"
	TableAppRecords        = "app_records"
	TableEngineSamples     = "engine_samples"
	TableEngineSpans       = "engine_spans"
	TableEngineLogs        = "engine_logs"
	TableGatewayHeartbeats = "gateway_heartbeats"
	TableIngestErrors      = "ingest_errors"
)

// TableFor returns the landing table of events of kind k, and false for an unknown kind.
func TableFor(k schema.Kind) (string, bool) {
	switch k {
	case schema.KindRequestStarted:
		return TableRequestsStarted, true
	case schema.KindRequestFinished:
		return TableRequests, true
	case schema.KindAppRecord:
		return TableAppRecords, true
	case schema.KindEngineSample:
		return TableEngineSamples, true
	case schema.KindEngineSpan:
		return TableEngineSpans, true
	case schema.KindEngineLog:
		return TableEngineLogs, true
	case schema.KindGatewayHeartbeat:
		return TableGatewayHeartbeats, true
	}
	return "", false
}

// Tables lists every table the consumer writes: one per kind in schema order, then ingest_errors.
func Tables() []string {
	out := make([]string, 0, len(schema.Kinds())+1)
	for _, k := range schema.Kinds() {
		name, _ := TableFor(k)
		out = append(out, name)
	}
	return append(out, TableIngestErrors)
}

// nullTime is a Nullable(DateTime64) value: NULL for the zero time, which the schema uses for
// "absent" in optional timestamps.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// strMap returns m, or an empty map for nil: a Map column has no NULL.
func strMap(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}

// tableDefs returns the table of each kind. The column lists match the migrations exactly;
// TestTableColumnsMatchMigration checks them against a migrated database.
func tableDefs() map[schema.Kind]*table {
	return map[schema.Kind]*table{
		schema.KindRequestStarted: {
			name: TableRequestsStarted,
			columns: []string{
				"event_id", "request_id", "ts", "arrival_ts", "model", "endpoint", "stream", "max_tokens",
				"prompt_bytes", "app", "prompt_version", "config_version", "index_version",
				"embedding_model_version", "trace_id", "gateway",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.RequestStarted)
				return append(dst,
					e.EventID, e.RequestID, e.TS, e.ArrivalTS, e.Model, e.Endpoint, e.Stream, e.MaxTokens,
					e.PromptBytes, e.App, e.PromptVersion, e.ConfigVersion, e.IndexVersion,
					e.EmbeddingModelVersion, e.TraceID, e.Gateway,
				)
			},
		},
		schema.KindRequestFinished: {
			name: TableRequests,
			columns: []string{
				"event_id", "request_id", "ts", "arrival_ts", "finished_ts", "model", "endpoint", "stream",
				"status_code", "error_layer", "error_code", "error_message", "queue_s", "prefill_s",
				"decode_s", "ttft_s", "tpot_s", "e2e_s", "scheduled_to_first_token_s", "engine_itl_s", "prompt_tokens",
				"completion_tokens", "cached_tokens", "tokens_estimated", "finish_reason", "finish_reasons",
				"response_id", "max_tokens", "output_foreign_chars", "output_script_violation", "app",
				"prompt_version", "config_version", "index_version", "embedding_model_version", "trace_id",
				"span_id", "parent_span_id", "trace_sampled", "upstream", "gateway", "prompt_text", "output_text",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.RequestFinished)
				finishReasons := e.FinishReasons
				if finishReasons == nil {
					finishReasons = []string{}
				}
				return append(dst,
					e.EventID, e.RequestID, e.TS, e.ArrivalTS, e.FinishedTS, e.Model, e.Endpoint, e.Stream,
					e.StatusCode, e.ErrorLayer, e.ErrorCode, e.ErrorMessage, e.QueueSeconds, e.PrefillSeconds,
					e.DecodeSeconds, e.TTFTSeconds, e.TPOTSeconds, e.E2ESeconds, e.ScheduledToFirstTokenSeconds, e.EngineITLSeconds, e.PromptTokens,
					e.CompletionTokens, e.CachedTokens, e.TokensEstimated, e.FinishReason, finishReasons,
					e.ResponseID, e.MaxTokens, e.OutputForeignChars, e.OutputScriptViolation, e.App,
					e.PromptVersion, e.ConfigVersion, e.IndexVersion, e.EmbeddingModelVersion, e.TraceID,
					e.SpanID, e.ParentSpanID, e.TraceSampled, e.Upstream, e.Gateway, e.PromptText, e.OutputText,
				)
			},
		},
		schema.KindAppRecord: {
			name: TableAppRecords,
			columns: []string{
				"event_id", "request_id", "trace_id", "ts", "app", "model", "passage_ids", "retrieval_scores",
				"passage_sources", "retrieval_top_score", "retrieval_s", "embedding_model_version",
				"index_version", "prompt_version", "config_version", "cache_hit", "cache_kind",
				"citation_count", "citations_missing", "output_foreign_chars", "output_script_violation",
				"error_layer", "error_message",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.AppRecord)
				ids := make([]string, len(e.Passages))
				scores := make([]float64, len(e.Passages))
				sources := make([]string, len(e.Passages))
				for i, p := range e.Passages {
					ids[i], scores[i], sources[i] = p.ID, p.Score, p.Source
				}
				return append(dst,
					e.EventID, e.RequestID, e.TraceID, e.TS, e.App, e.Model, ids, scores,
					sources, e.RetrievalTopScore, e.RetrievalSeconds, e.EmbeddingModelVersion,
					e.IndexVersion, e.PromptVersion, e.ConfigVersion, e.CacheHit, e.CacheKind,
					e.CitationCount, e.CitationsMissing, e.OutputForeignChars, e.OutputScriptViolation,
					e.ErrorLayer, e.ErrorMessage,
				)
			},
		},
		schema.KindEngineSample: {
			name: TableEngineSamples,
			columns: []string{
				"event_id", "ts", "engine", "model", "engine_index", "engines", "up", "scrape_error", "scrape_duration_s",
				"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "gauges",
				"counters", "histogram_sum", "histogram_count", "histogram_buckets",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.EngineSample)
				sums := make(map[string]float64, len(e.Histograms))
				counts := make(map[string]float64, len(e.Histograms))
				buckets := make(map[string][]map[string]any, len(e.Histograms))
				for name, h := range e.Histograms {
					sums[name], counts[name] = h.Sum, h.Count
					bs := make([]map[string]any, len(h.Buckets))
					for i, b := range h.Buckets {
						bs[i] = map[string]any{"le": float64(b.LE), "count": b.Count}
					}
					buckets[name] = bs
				}
				return append(dst,
					e.EventID, e.TS, e.Engine, e.Model, e.EngineIndex, e.Engines, e.Up, e.ScrapeError, e.ScrapeDurationSeconds,
					e.NumRequestsRunning, e.NumRequestsWaiting, e.KVCacheUsagePerc, strMap(e.Gauges),
					strMap(e.Counters), sums, counts, buckets,
				)
			},
		},
		schema.KindEngineSpan: {
			name: TableEngineSpans,
			columns: []string{
				"event_id", "request_id", "engine_request_id", "prompt_index", "child_index", "trace_id",
				"span_id", "parent_span_id", "ts", "start_ts", "engine", "model", "queue_s", "prefill_s", "decode_s",
				"inference_s", "ttft_s", "e2e_s", "prompt_tokens", "completion_tokens", "finish_reason",
				"max_tokens", "temperature", "top_p", "n",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.EngineSpan)
				return append(dst,
					e.EventID, e.RequestID, e.EngineRequestID, e.PromptIndex, e.ChildIndex, e.TraceID,
					e.SpanID, e.ParentSpanID, e.TS, nullTime(e.StartTS), e.Engine, e.Model, e.QueueSeconds, e.PrefillSeconds, e.DecodeSeconds,
					e.InferenceSeconds, e.TTFTSeconds, e.E2ESeconds, e.PromptTokens, e.CompletionTokens, e.FinishReason,
					e.MaxTokens, e.Temperature, e.TopP, e.N,
				)
			},
		},
		schema.KindEngineLog: {
			name: TableEngineLogs,
			columns: []string{
				"event_id", "ts", "engine", "source", "offset", "line", "level", "process", "logger",
				"engine_index", "engines", "message", "prompt_throughput_tps", "generation_throughput_tps", "running", "waiting",
				"kv_cache_usage_perc", "prefix_cache_hit_rate", "preemptions", "exception_type", "oom_bytes_requested",
				"oom_total_capacity_bytes", "oom_free_bytes", "frames",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.EngineLog)
				frames := e.Frames
				if frames == nil {
					frames = []string{}
				}
				return append(dst,
					e.EventID, e.TS, e.Engine, e.Source, e.Offset, e.Line, e.Level, e.Process, e.Logger,
					e.EngineIndex, e.Engines, e.Message, e.PromptThroughputTPS, e.GenerationThroughputTPS, e.Running, e.Waiting,
					e.KVCacheUsagePerc, e.PrefixCacheHitRate, e.Preemptions, e.ExceptionType, e.OOMBytesRequested,
					e.OOMTotalCapacityBytes, e.OOMFreeBytes, frames,
				)
			},
		},
		schema.KindGatewayHeartbeat: {
			name: TableGatewayHeartbeats,
			columns: []string{
				"event_id", "ts", "gateway", "interval_s", "listed_after_s", "in_flight", "open_omitted",
				"open_request_id", "open_arrival_ts", "open_model", "open_endpoint", "open_stream",
				"open_upstream", "open_app", "open_phase",
			},
			row: func(dst []any, ev schema.Event) []any {
				e := ev.(*schema.GatewayHeartbeat)
				n := len(e.Open)
				ids, arrivals, models, endpoints := make([]string, n), make([]time.Time, n), make([]string, n), make([]string, n)
				streams, upstreams, apps, phases := make([]bool, n), make([]string, n), make([]string, n), make([]string, n)
				for i, o := range e.Open {
					ids[i], arrivals[i], models[i], endpoints[i] = o.RequestID, o.ArrivalTS, o.Model, o.Endpoint
					streams[i], upstreams[i], apps[i], phases[i] = o.Stream, o.Upstream, o.App, o.Phase
				}
				return append(dst,
					e.EventID, e.TS, e.Gateway, e.IntervalSeconds, e.ListedAfterSeconds, e.InFlight, e.OpenOmitted,
					ids, arrivals, models, endpoints, streams, upstreams, apps, phases,
				)
			},
		},
	}
}

// ingestErrorColumns are the columns of ingest_errors the consumer writes.
func ingestErrorColumns() []string {
	return []string{"ts", "subject", "stream_seq", "reason", "payload"}
}
