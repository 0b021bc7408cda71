package synth

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// batchRows bounds one INSERT so a week of traffic does not sit in one client-side block.
const batchRows = 50_000

// Insert writes the traffic into the landing tables (requests_started, requests, app_records,
// engine_samples) with native batch inserts, mapping each event's fields to the columns of the same
// name. It is the shortcut tests take around NATS and the consumer.
func Insert(ctx context.Context, conn driver.Conn, t *Traffic) error {
	if err := insertEach(ctx, conn, "requests_started",
		"event_id, request_id, ts, arrival_ts, model, endpoint, stream, max_tokens, prompt_bytes, app, "+
			"prompt_version, config_version, index_version, embedding_model_version, trace_id, gateway",
		len(t.Started), func(b driver.Batch, i int) error {
			e := t.Started[i]
			return b.Append(e.EventID, e.RequestID, e.TS, e.ArrivalTS, e.Model, e.Endpoint, e.Stream, e.MaxTokens,
				e.PromptBytes, e.App, e.PromptVersion, e.ConfigVersion, e.IndexVersion, e.EmbeddingModelVersion,
				e.TraceID, e.Gateway)
		}); err != nil {
		return err
	}
	if err := insertEach(ctx, conn, "requests",
		"event_id, request_id, ts, arrival_ts, finished_ts, model, endpoint, stream, status_code, error_layer, "+
			"error_code, error_message, queue_s, prefill_s, decode_s, ttft_s, tpot_s, e2e_s, prompt_tokens, "+
			"completion_tokens, cached_tokens, finish_reason, max_tokens, output_foreign_chars, "+
			"output_script_violation, app, prompt_version, config_version, index_version, embedding_model_version",
		len(t.Finished), func(b driver.Batch, i int) error {
			e := t.Finished[i]
			return b.Append(e.EventID, e.RequestID, e.TS, e.ArrivalTS, e.FinishedTS, e.Model, e.Endpoint, e.Stream,
				e.StatusCode, e.ErrorLayer, e.ErrorCode, e.ErrorMessage, e.QueueSeconds, e.PrefillSeconds, e.DecodeSeconds, e.TTFTSeconds,
				e.TPOTSeconds, e.E2ESeconds, e.PromptTokens, e.CompletionTokens, e.CachedTokens, e.FinishReason, e.MaxTokens,
				e.OutputForeignChars, e.OutputScriptViolation, e.App, e.PromptVersion, e.ConfigVersion,
				e.IndexVersion, e.EmbeddingModelVersion)
		}); err != nil {
		return err
	}
	if err := insertEach(ctx, conn, "app_records",
		"event_id, request_id, ts, app, model, passage_ids, retrieval_scores, passage_sources, "+
			"retrieval_top_score, retrieval_s, embedding_model_version, index_version, prompt_version, "+
			"config_version, output_foreign_chars, output_script_violation",
		len(t.Apps), func(b driver.Batch, i int) error {
			e := t.Apps[i]
			ids := make([]string, len(e.Passages))
			scores := make([]float64, len(e.Passages))
			sources := make([]string, len(e.Passages))
			for j, p := range e.Passages {
				ids[j], scores[j], sources[j] = p.ID, p.Score, p.Source
			}
			return b.Append(e.EventID, e.RequestID, e.TS, e.App, e.Model, ids, scores, sources,
				e.RetrievalTopScore, e.RetrievalSeconds, e.EmbeddingModelVersion, e.IndexVersion, e.PromptVersion,
				e.ConfigVersion, e.OutputForeignChars, e.OutputScriptViolation)
		}); err != nil {
		return err
	}
	return insertEach(ctx, conn, "engine_samples",
		"event_id, ts, engine, model, up, scrape_error, scrape_duration_s, num_requests_running, "+
			"num_requests_waiting, kv_cache_usage_perc, gauges",
		len(t.Samples), func(b driver.Batch, i int) error {
			e := t.Samples[i]
			gauges := e.Gauges
			if gauges == nil {
				gauges = map[string]float64{}
			}
			return b.Append(e.EventID, e.TS, e.Engine, e.Model, e.Up, e.ScrapeError, e.ScrapeDurationSeconds,
				e.NumRequestsRunning, e.NumRequestsWaiting, e.KVCacheUsagePerc, gauges)
		})
}

func insertEach(ctx context.Context, conn driver.Conn, table, columns string, n int, add func(driver.Batch, int) error) error {
	for start := 0; start < n; start += batchRows {
		end := min(n, start+batchRows)
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" ("+columns+")")
		if err != nil {
			return fmt.Errorf("prepare insert into %s: %w", table, err)
		}
		for i := start; i < end; i++ {
			if err := add(b, i); err != nil {
				_ = b.Abort()
				return fmt.Errorf("append row %d to %s: %w", i, table, err)
			}
		}
		if err := b.Send(); err != nil {
			return fmt.Errorf("insert %d rows into %s: %w", end-start, table, err)
		}
	}
	return nil
}
