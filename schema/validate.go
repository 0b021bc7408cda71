package schema

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxFutureSkew is how far in the future an event's timestamps may be before the event is refused
// (a clock that far ahead would put the event outside every detection window).
const MaxFutureSkew = 5 * time.Minute

// Size limits of string fields, in bytes, as Validate enforces them (and the JSON Schema states
// them as maxLength). Producers bound what they copy from outside with [Truncate] to these.
const (
	// MaxIDBytes bounds ids: event_id, request_id.
	MaxIDBytes = 128
	// MaxLabelBytes bounds labels: model, endpoint, versions, error_code, gateway, response_id.
	MaxLabelBytes = 256
	// MaxURLBytes bounds URLs and engine names: upstream, engine, source.
	MaxURLBytes = 1024
	// MaxMessageBytes bounds error messages.
	MaxMessageBytes = 8 << 10
	// MaxLineBytes bounds one engine log line.
	MaxLineBytes = 16 << 10
	// MaxContentBytes bounds captured prompt and output text.
	MaxContentBytes = 256 << 10
	// MaxFinishReasonBytes bounds one finish reason.
	MaxFinishReasonBytes = 64
	// MaxTraceIDBytes is the length of a W3C trace id in hex.
	MaxTraceIDBytes = 32
	// MaxSpanIDBytes is the length of a W3C span id (a traceparent's parent-id) in hex.
	MaxSpanIDBytes = 16
	// MaxFinishReasons bounds finish_reasons (one per choice).
	MaxFinishReasons = 1024
)

// Short names for the limits inside this file.
const (
	maxID      = MaxIDBytes
	maxLabel   = MaxLabelBytes
	maxURL     = MaxURLBytes
	maxMessage = MaxMessageBytes
	maxLine    = MaxLineBytes
	maxContent = MaxContentBytes
)

// FieldError is one invalid field.
type FieldError struct {
	// Field is the JSON name of the field, e.g. "ttft_s" or "passages[3].id"; empty for the whole event.
	Field string `json:"field"`
	// Reason says what is wrong with it.
	Reason string `json:"reason"`
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// ValidationErrors lists every invalid field of an event.
type ValidationErrors []FieldError

func (v ValidationErrors) Error() string {
	parts := make([]string, len(v))
	for i, e := range v {
		parts[i] = e.Error()
	}
	return "invalid event: " + strings.Join(parts, "; ")
}

// validator collects field errors.
type validator struct {
	now  time.Time
	errs ValidationErrors
}

func (v *validator) add(field, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

func (v *validator) str(field, s string, max int) {
	if !utf8.ValidString(s) {
		v.add(field, "invalid UTF-8")
		return
	}
	if len(s) > max {
		v.add(field, "%d bytes, over the limit of %d", len(s), max)
	}
}

func (v *validator) required(field, s string, max int) {
	if s == "" {
		v.add(field, "missing")
		return
	}
	v.str(field, s, max)
}

func (v *validator) ts(field string, t time.Time, required bool) {
	if t.IsZero() {
		if required {
			v.add(field, "missing")
		}
		return
	}
	if t.After(v.now.Add(MaxFutureSkew)) {
		v.add(field, "%s is more than %s in the future", t.UTC().Format(time.RFC3339Nano), MaxFutureSkew)
	}
	if t.Year() < 2000 {
		v.add(field, "%s is before the year 2000", t.UTC().Format(time.RFC3339Nano))
	}
}

func (v *validator) duration(field string, d *float64) {
	if d == nil {
		return
	}
	switch {
	case math.IsNaN(*d) || math.IsInf(*d, 0):
		v.add(field, "not a finite number")
	case *d < 0:
		v.add(field, "negative duration %g", *d)
	}
}

func (v *validator) finite(field string, f *float64) {
	if f != nil && (math.IsNaN(*f) || math.IsInf(*f, 0)) {
		v.add(field, "not a finite number")
	}
}

func (v *validator) nonNegative(field string, f *float64) { v.duration(field, f) }

func (v *validator) header(h *Header, k Kind, requestRequired bool) {
	switch {
	case h.Schema == "":
		v.add("schema", "missing")
	case h.Schema != k.SchemaID():
		v.add("schema", "%q, want %q", h.Schema, k.SchemaID())
	}
	v.required("event_id", h.EventID, maxID)
	if requestRequired {
		v.required("request_id", h.RequestID, maxID)
	} else {
		v.str("request_id", h.RequestID, maxID)
	}
	v.ts("ts", h.TS, true)
}

func (v *validator) versions(x *Versions) {
	v.str("app", x.App, maxLabel)
	v.str("prompt_version", x.PromptVersion, maxLabel)
	v.str("config_version", x.ConfigVersion, maxLabel)
	v.str("index_version", x.IndexVersion, maxLabel)
	v.str("embedding_model_version", x.EmbeddingModelVersion, maxLabel)
}

func (v *validator) layer(field, s string) {
	switch s {
	case "", LayerGateway, LayerUpstream, LayerClient, LayerApp, LayerRetrieval:
	default:
		v.add(field, "unknown layer %q (want gateway, upstream, client, app or retrieval)", s)
	}
}

func (v *validator) result() error {
	if len(v.errs) == 0 {
		return nil
	}
	return v.errs
}

// Validate implements Event.
func (e *RequestStarted) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *RequestStarted) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindRequestStarted, true)
	v.versions(&e.Versions)
	v.ts("arrival_ts", e.ArrivalTS, true)
	v.str("model", e.Model, maxLabel)
	v.required("endpoint", e.Endpoint, maxLabel)
	v.str("trace_id", e.TraceID, MaxTraceIDBytes)
	v.str("gateway", e.Gateway, maxLabel)
	return v.result()
}

// Validate implements Event.
func (e *RequestFinished) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *RequestFinished) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindRequestFinished, true)
	v.versions(&e.Versions)
	v.ts("arrival_ts", e.ArrivalTS, true)
	v.ts("finished_ts", e.FinishedTS, true)
	if !e.ArrivalTS.IsZero() && !e.FinishedTS.IsZero() && e.FinishedTS.Before(e.ArrivalTS) {
		v.add("finished_ts", "before arrival_ts")
	}
	v.str("model", e.Model, maxLabel)
	v.required("endpoint", e.Endpoint, maxLabel)
	if e.StatusCode < 100 || e.StatusCode > 599 {
		v.add("status_code", "%d is not an HTTP status", e.StatusCode)
	}
	v.layer("error_layer", e.ErrorLayer)
	v.str("error_code", e.ErrorCode, maxLabel)
	v.str("error_message", e.ErrorMessage, maxMessage)
	for _, d := range []struct {
		name string
		val  *float64
	}{
		{"ttft_s", e.TTFTSeconds}, {"tpot_s", e.TPOTSeconds}, {"e2e_s", e.E2ESeconds}, {"queue_s", e.QueueSeconds},
		{"prefill_s", e.PrefillSeconds}, {"decode_s", e.DecodeSeconds}, {"scheduled_to_first_token_s", e.ScheduledToFirstTokenSeconds}, {"engine_itl_s", e.EngineITLSeconds},
	} {
		v.duration(d.name, d.val)
	}
	v.str("finish_reason", e.FinishReason, MaxFinishReasonBytes)
	if len(e.FinishReasons) > MaxFinishReasons {
		v.add("finish_reasons", "%d finish reasons, over the limit of %d", len(e.FinishReasons), MaxFinishReasons)
	}
	for i, r := range e.FinishReasons {
		v.str(fmt.Sprintf("finish_reasons[%d]", i), r, MaxFinishReasonBytes)
	}
	v.str("response_id", e.ResponseID, maxLabel)
	v.str("trace_id", e.TraceID, MaxTraceIDBytes)
	v.str("span_id", e.SpanID, MaxSpanIDBytes)
	v.str("parent_span_id", e.ParentSpanID, MaxSpanIDBytes)
	v.str("upstream", e.Upstream, maxURL)
	v.str("gateway", e.Gateway, maxLabel)
	v.str("prompt_text", e.PromptText, maxContent)
	v.str("output_text", e.OutputText, maxContent)
	return v.result()
}

// Validate implements Event.
func (e *AppRecord) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *AppRecord) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindAppRecord, true)
	v.versions(&e.Versions)
	v.str("model", e.Model, maxLabel)
	if len(e.Passages) > 1000 {
		v.add("passages", "%d passages, over the limit of 1000", len(e.Passages))
	}
	for i := range e.Passages {
		p := &e.Passages[i]
		f := fmt.Sprintf("passages[%d]", i)
		v.required(f+".id", p.ID, 512)
		v.str(f+".source", p.Source, maxURL)
		v.finite(f+".score", &p.Score)
	}
	v.finite("retrieval_top_score", e.RetrievalTopScore)
	v.duration("retrieval_s", e.RetrievalSeconds)
	v.str("cache_kind", e.CacheKind, 64)
	v.str("error_layer", e.ErrorLayer, 64)
	v.str("error_message", e.ErrorMessage, maxMessage)
	v.str("trace_id", e.TraceID, MaxTraceIDBytes)
	return v.result()
}

// Validate implements Event.
func (e *EngineSample) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *EngineSample) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindEngineSample, false)
	v.required("engine", e.Engine, maxURL)
	v.str("model", e.Model, maxLabel)
	v.str("engine_index", e.EngineIndex, 16)
	v.str("scrape_error", e.ScrapeError, maxMessage)
	v.duration("scrape_duration_s", e.ScrapeDurationSeconds)
	v.nonNegative("num_requests_running", e.NumRequestsRunning)
	v.nonNegative("num_requests_waiting", e.NumRequestsWaiting)
	v.nonNegative("kv_cache_usage_perc", e.KVCacheUsagePerc)
	if n := len(e.Gauges) + len(e.Counters) + len(e.Histograms); n > 2000 {
		v.add("", "%d metrics, over the limit of 2000", n)
	}
	for name, g := range e.Gauges {
		v.str("gauges key", name, maxLabel)
		v.finite("gauges["+name+"]", &g)
	}
	for name, c := range e.Counters {
		v.str("counters key", name, maxLabel)
		v.finite("counters["+name+"]", &c)
	}
	for name, h := range e.Histograms {
		v.str("histograms key", name, maxLabel)
		if len(h.Buckets) > 200 {
			v.add("histograms["+name+"].buckets", "%d buckets, over the limit of 200", len(h.Buckets))
		}
		// JSON numbers cannot hold NaN or ±Inf; only bucket bounds have a string form for them.
		v.finite("histograms["+name+"].sum", &h.Sum)
		v.finite("histograms["+name+"].count", &h.Count)
		for i := range h.Buckets {
			v.finite(fmt.Sprintf("histograms[%s].buckets[%d].count", name, i), &h.Buckets[i].Count)
		}
	}
	return v.result()
}

// Validate implements Event.
func (e *EngineSpan) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *EngineSpan) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindEngineSpan, true)
	v.str("engine_request_id", e.EngineRequestID, maxLabel)
	v.str("trace_id", e.TraceID, MaxTraceIDBytes)
	v.str("span_id", e.SpanID, MaxSpanIDBytes)
	v.str("parent_span_id", e.ParentSpanID, MaxSpanIDBytes)
	v.str("engine", e.Engine, maxURL)
	v.str("model", e.Model, maxLabel)
	v.str("finish_reason", e.FinishReason, 64)
	v.ts("start_ts", e.StartTS, false)
	for _, d := range []struct {
		name string
		val  *float64
	}{
		{"queue_s", e.QueueSeconds}, {"prefill_s", e.PrefillSeconds}, {"decode_s", e.DecodeSeconds},
		{"inference_s", e.InferenceSeconds}, {"ttft_s", e.TTFTSeconds}, {"e2e_s", e.E2ESeconds},
	} {
		v.duration(d.name, d.val)
	}
	v.finite("temperature", e.Temperature)
	v.finite("top_p", e.TopP)
	return v.result()
}

// Validate implements Event.
func (e *EngineLog) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *EngineLog) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindEngineLog, false)
	v.required("engine", e.Engine, maxURL)
	v.str("source", e.Source, maxURL)
	v.str("line", e.Line, maxLine)
	v.str("level", e.Level, 16)
	v.str("process", e.Process, maxLabel)
	v.str("logger", e.Logger, maxLabel)
	v.str("message", e.Message, maxLine)
	v.nonNegative("prompt_throughput_tps", e.PromptThroughputTPS)
	v.nonNegative("generation_throughput_tps", e.GenerationThroughputTPS)
	v.nonNegative("kv_cache_usage_perc", e.KVCacheUsagePerc)
	v.nonNegative("prefix_cache_hit_rate", e.PrefixCacheHitRate)
	v.str("exception_type", e.ExceptionType, maxLabel)
	if len(e.Frames) > 64 {
		v.add("frames", "%d frames, over the limit of 64", len(e.Frames))
	}
	for i, f := range e.Frames {
		v.str(fmt.Sprintf("frames[%d]", i), f, maxURL)
	}
	return v.result()
}

// Truncate returns s cut to at most max bytes without splitting a UTF-8 sequence; producers use
// it to keep free text within the limits Validate enforces.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// Validate implements Event.
func (e *GatewayHeartbeat) Validate() error { return e.ValidateAt(time.Now()) }

// ValidateAt implements Event.
func (e *GatewayHeartbeat) ValidateAt(now time.Time) error {
	v := &validator{now: now}
	v.header(&e.Header, KindGatewayHeartbeat, false)
	v.required("gateway", e.Gateway, maxLabel)
	iv, after := e.IntervalSeconds, e.ListedAfterSeconds
	v.duration("interval_s", &iv)
	v.duration("listed_after_s", &after)
	if len(e.Open) > MaxOpenListed {
		v.add("open", "%d requests, over the limit of %d", len(e.Open), MaxOpenListed)
	}
	for i := range e.Open {
		o := &e.Open[i]
		f := func(name string) string { return fmt.Sprintf("open[%d].%s", i, name) }
		v.required(f("request_id"), o.RequestID, maxID)
		v.ts(f("arrival_ts"), o.ArrivalTS, true)
		v.str(f("model"), o.Model, maxLabel)
		v.str(f("endpoint"), o.Endpoint, maxLabel)
		v.str(f("upstream"), o.Upstream, maxURL)
		v.str(f("app"), o.App, maxLabel)
		switch o.Phase {
		case "", "request", "upstream", "responding":
		default:
			v.add(f("phase"), "unknown phase %q (want request, upstream or responding)", o.Phase)
		}
	}
	return v.result()
}
