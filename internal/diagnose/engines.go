package diagnose

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/chstore"
)

// Branch IDs of the failures that make no noise of their own, one finding per engine: the
// detector's engine_not_scraped, engine_spans_missing and kv_cache_stuck rules read the same
// quantities over their windows.
const (
	BranchEngineNotScraped = "engine_not_scraped"
	BranchSpansMissing     = "engine_spans_missing"
	BranchKVStuck          = "kv_cache_stuck"
)

// Thresholds of the engine health branches (the detector's rules use the same values).
const (
	// SpansMinRequests is how many sampled gateway requests for an engine's model the window must
	// hold, and SpansMinBaseline how many spans the engine must have sent in the baseline, before
	// a window without its spans says its tracing broke.
	SpansMinRequests = 20
	SpansMinBaseline = 20
	// KVStuckMinShare is the KV cache usage an engine with nothing running should never hold;
	// KVStuckMinSamples the idle samples needed to say it does.
	KVStuckMinShare   = 0.5
	KVStuckMinSamples = 5
)

// EngineHealth is one engine's health over a window (see sql/engines.sql).
type EngineHealth struct {
	// Engine is the engine's name as the collector scrapes it (a data-parallel engine's children
	// together); Model the model it served.
	Engine string `json:"engine"`
	Model  string `json:"model,omitempty"`
	// Scrapes and Failed count its scrapes and the failed ones (up = 0); LastUp and LastScrape
	// are its last scrape's state and time, LastError the last failure's error.
	Scrapes    uint64    `json:"scrapes"`
	Failed     uint64    `json:"failed"`
	LastUp     bool      `json:"last_up"`
	LastScrape time.Time `json:"last_scrape"`
	LastError  string    `json:"last_error,omitempty"`
	// IdleSamples are its samples with nothing running; IdleKVMin their lowest KV cache usage
	// (fraction), IdleWaitingMax their most requests waiting.
	IdleSamples    uint64   `json:"idle_samples"`
	IdleKVMin      *float64 `json:"idle_kv_min,omitempty"`
	IdleWaitingMax *float64 `json:"idle_waiting_max,omitempty"`
	// Spans and BaselineSpans are the spans it sent in the window and in the baseline;
	// GatewayRequests the gateway's sampled requests for its model in the window.
	Spans, BaselineSpans, GatewayRequests uint64
}

// readEngines reads each engine's health over the window, with the baseline's spans.
func readEngines(ctx context.Context, conn driver.Conn, window, baseline Range, model string) ([]EngineHealth, error) {
	pctx := chstore.WithParams(ctx, map[string]string{
		"from_us": fmt.Sprint(window.From.UnixMicro()), "to_us": fmt.Sprint(window.To.UnixMicro()),
		"base_from_us": fmt.Sprint(baseline.From.UnixMicro()), "base_to_us": fmt.Sprint(baseline.To.UnixMicro()),
		"model": chstore.StringParam(model),
	})
	rows, err := conn.Query(pctx, query("engines"))
	if err != nil {
		return nil, fmt.Errorf("read the engines' health: %w", err)
	}
	defer rows.Close()
	var out []EngineHealth
	for rows.Next() {
		var e EngineHealth
		if err := rows.Scan(&e.Engine, &e.Model, &e.Scrapes, &e.Failed, &e.LastUp, &e.LastScrape, &e.LastError,
			&e.IdleSamples, &e.IdleKVMin, &e.IdleWaitingMax, &e.Spans, &e.BaselineSpans, &e.GatewayRequests); err != nil {
			return nil, fmt.Errorf("read the engines' health: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// engineBranches walks the three silent failures over each engine, each finding naming the engines.
func engineBranches(engines []EngineHealth) []Branch {
	return []Branch{notScraped(engines), spansMissing(engines), kvStuck(engines)}
}

func notScraped(engines []EngineHealth) Branch {
	br := Branch{ID: BranchEngineNotScraped, Title: "Engine not scraped (its /metrics cannot be read, with or without traffic)"}
	if len(engines) == 0 {
		br.Status, br.Conclusion = StatusNoData, "no engine sample was recorded: no engine is scraped by a collector in this window"
		return br
	}
	var down []string
	for _, e := range engines {
		if e.LastUp {
			continue
		}
		down = append(down, e.Engine)
		br.Evidence = append(br.Evidence, fmt.Sprintf("engine %s: its last scrape, at %s, failed (%d of %d scrapes in the window): %s",
			e.Engine, stamp(&e.LastScrape), e.Failed, e.Scrapes, e.LastError))
	}
	if len(down) == 0 {
		br.Status, br.Conclusion = StatusClear, fmt.Sprintf("every engine's last scrape answered (%s)", names(engines))
		return br
	}
	br.Status = StatusFinding
	br.Conclusion = fmt.Sprintf("engine %s cannot be scraped at the window's end: it is down, hung or unreachable from the collector", strings.Join(down, ", "))
	br.NotRuledOut = "a deliberate stop, or a network fault between the collector and a live engine"
	br.Action = fmt.Sprintf("check the engine's process and GET /health; servescope postmortem --engine %s reads its last log lines", shellQuote(down[0]))
	return br
}

func spansMissing(engines []EngineHealth) Branch {
	br := Branch{ID: BranchSpansMissing, Title: "Engine spans missing while requests continue (the engine's tracing broke)"}
	var traced, missing []string
	for _, e := range engines {
		if e.BaselineSpans < SpansMinBaseline {
			continue
		}
		traced = append(traced, e.Engine)
		if e.Spans == 0 && e.GatewayRequests >= SpansMinRequests && e.Scrapes > e.Failed {
			missing = append(missing, e.Engine)
			br.Evidence = append(br.Evidence, fmt.Sprintf("engine %s (model %s): 0 spans in the window against %d in the baseline, while the gateway recorded %d sampled requests for its model",
				e.Engine, e.Model, e.BaselineSpans, e.GatewayRequests))
		}
	}
	switch {
	case len(traced) == 0:
		br.Status, br.Conclusion = StatusNoData, "no engine sent spans in the baseline: whether tracing broke cannot be told"
	case len(missing) == 0:
		br.Status, br.Conclusion = StatusClear, fmt.Sprintf("every engine that sent spans in the baseline sends them (%s), or had no requests to trace", strings.Join(traced, ", "))
	default:
		br.Status = StatusFinding
		br.Conclusion = fmt.Sprintf("engine %s sends no spans while the gateway records its requests: its tracing broke", strings.Join(missing, ", "))
		br.NotRuledOut = "that the requests went to another engine of the same model (its own request count says: engine_samples' request_success_total)"
		br.Action = "check the engine's --otlp-traces-endpoint against the collector's OTLP address and that its port is reachable from the engine; the engine phases are missing, not zero"
	}
	return br
}

func kvStuck(engines []EngineHealth) Branch {
	br := Branch{ID: BranchKVStuck, Title: "KV cache stuck high with nothing running (a cache-accounting fault, not pressure)"}
	var idle, stuck []string
	for _, e := range engines {
		if e.IdleSamples == 0 || e.IdleKVMin == nil {
			continue
		}
		idle = append(idle, e.Engine)
		if e.IdleSamples >= KVStuckMinSamples && *e.IdleKVMin >= KVStuckMinShare {
			stuck = append(stuck, e.Engine)
			ev := fmt.Sprintf("engine %s: %d samples with nothing running, the KV cache never under %s in them", e.Engine, e.IdleSamples, pct(*e.IdleKVMin))
			if e.IdleWaitingMax != nil && *e.IdleWaitingMax > 0 {
				ev += fmt.Sprintf(", up to %.0f requests waiting", *e.IdleWaitingMax)
			}
			br.Evidence = append(br.Evidence, ev)
		}
	}
	switch {
	case len(idle) == 0:
		br.Status, br.Conclusion = StatusNoData, "no engine was sampled with nothing running and its KV cache usage"
	case len(stuck) == 0:
		br.Status, br.Conclusion = StatusClear, fmt.Sprintf("every engine's KV cache emptied when nothing ran (%s)", strings.Join(idle, ", "))
	default:
		br.Status = StatusFinding
		br.Conclusion = fmt.Sprintf("engine %s holds its KV cache with nothing running: blocks that are never freed, not load", strings.Join(stuck, ", "))
		br.NotRuledOut = "a request running between two samples on an engine with sparse traffic: the samples with nothing running say what it holds idle"
		br.Action = "drain and restart the engine (it clears the cache); do not lower max_num_seqs: nothing runs"
	}
	return br
}

func names(engines []EngineHealth) string {
	var out []string
	for _, e := range engines {
		out = append(out, e.Engine)
	}
	return strings.Join(out, ", ")
}
