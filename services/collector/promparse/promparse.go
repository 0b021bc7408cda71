// Package promparse turns one scrape of a vLLM server's Prometheus /metrics into the values of
// servescope's engine.sample: the three instantaneous gauges every rule reads, the other gauges,
// the cumulative counters and the cumulative histograms, keyed by vLLM V1 names.
//
// Decoding is prometheus/common/expfmt's, in whichever format the response's Content-Type names
// (Prometheus text 0.0.4, OpenMetrics 1.0, or delimited protobuf). vLLM serves /metrics with
// prometheus_client, which answers OpenMetrics whenever the Accept header names it at all (it
// ignores q-values): [AcceptHeader] names only the text format. OpenMetrics is rewritten to the
// text format before parsing, because expfmt's OpenMetrics decoder takes seconds per exposition.
//
// Names. Keys are the metric family's name without the "vllm:" prefix (or the "vllm_" prefix of
// vLLM releases before 0.3), counters ending in "_total" (OpenMetrics names a counter family
// without it). Names of older releases are mapped to their V1 successors (see [LegacyNames]), so
// one query reads every release; when a server exposes both an old and a new name (vLLM 0.9–0.10
// always, 0.11+ with --show-hidden-metrics-for-version), the new name's value is kept. A name is
// mapped only when it measures the same thing in the same unit: vLLM 0.8's
// vllm:gpu_prefix_cache_queries/hits counted KV blocks, not the tokens that
// vllm:prefix_cache_queries/hits count, so those keep their own name (told apart by the HELP text,
// which names the unit). Families outside vLLM are dropped except the process_* ones
// (process_start_time_seconds shows a restart), and so are "_created" series (prometheus_client's
// creation timestamps) and info-style gauges (names ending in "_info", which carry configuration
// in labels, not values). Every other vllm: family, known or not, is kept under its own name.
//
// Labels. vLLM labels every V1 series with model_name and engine (V0: model_name only); those two
// become [EngineMetrics].Model and [EngineMetrics].EngineIndex. The pid label that
// prometheus_client's multiprocess mode adds to gauges declared without a multiprocess_mode (vLLM
// 0.10's vllm:kv_cache_usage_perc, served by several API server processes) is not a dimension of
// the engine: the series of all processes are one gauge, and the largest value is kept. Any other
// label distinguishes series of one family and is kept in the key, Prometheus-style:
// request_success_total{finished_reason="length"}.
//
// Several engines. A data-parallel vLLM server exposes one series per engine core, told apart by
// the `engine` label (0, 1, ...). Each engine has its own slot limit (max_num_seqs) and its own
// KV cache, so summing them would hide "running capped at 256" and average KV pressure away:
// [Convert] returns one [EngineMetrics] per engine label value instead.
package promparse

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/servescope/servescope/schema"
)

// Names of the three gauges with their own engine.sample fields, without the "vllm:" prefix.
const (
	NumRequestsRunning = "num_requests_running"
	NumRequestsWaiting = "num_requests_waiting"
	KVCacheUsagePerc   = "kv_cache_usage_perc"
)

// MaxExpositionBytes bounds an exposition read; MaxLineBytes one line of it.
const (
	MaxExpositionBytes = 16 << 20
	MaxLineBytes       = 1 << 20
)

// MaxKeyBytes is the longest metric key kept (the schema's limit for map keys); a longer key,
// made by an unexpected label, is dropped rather than truncated into a false name.
const MaxKeyBytes = 256

// maxSeries bounds the series kept per engine (the schema's limit is 2000 metrics per sample).
const maxSeries = 1500

// v1Name maps a metric name of an older vLLM release (without prefix) to the V1 name that
// replaced it; help is the family's HELP text. time_per_output_token_seconds was observed once per
// decode step and request (vllm/v1/metrics/loggers.py, vllm/engine/metrics.py), which is what
// vLLM 0.11 renamed inter_token_latency_seconds (its deprecation note says so); the per-request
// request_time_per_output_token_seconds is a different aggregation and has no older name.
func v1Name(name, help string) (string, bool) {
	switch name {
	case "gpu_cache_usage_perc":
		return KVCacheUsagePerc, true
	case "gpu_prefix_cache_queries_total", "gpu_prefix_cache_hits_total":
		if strings.Contains(help, "blocks") {
			// vLLM 0.8: counted in KV blocks, not comparable with the token counts.
			return name, false
		}
		return "prefix_cache_" + strings.TrimPrefix(name, "gpu_prefix_cache_"), true
	case "time_per_output_token_seconds":
		return "inter_token_latency_seconds", true
	}
	return name, false
}

// LegacyNames returns the old-name → V1-name mapping that [Convert] applies (the prefix-cache
// counters only when their HELP text counts tokens).
func LegacyNames() map[string]string {
	m := map[string]string{}
	for _, old := range []string{"gpu_cache_usage_perc", "gpu_prefix_cache_queries_total", "gpu_prefix_cache_hits_total", "time_per_output_token_seconds"} {
		m[old], _ = v1Name(old, "tokens")
	}
	return m
}

// AcceptHeader is the Accept header a scraper should send: the Prometheus text format only.
// vLLM's prometheus_client answers OpenMetrics as soon as the header names
// application/openmetrics-text, whatever its q-value, so naming it at all would get OpenMetrics
// from every vLLM; a server that sends it anyway (or protobuf) is still read (see [Decode]).
const AcceptHeader = `text/plain;version=0.0.4;q=1,*/*;q=0.1`

// EngineMetrics is what one engine core exposed in one scrape.
type EngineMetrics struct {
	// EngineIndex is the value of vLLM's `engine` label ("0", "1", ...); empty when the server
	// does not label its series (V0 releases).
	EngineIndex string
	// Model is the value of the model_name label.
	Model string
	// Running, Waiting and KVCacheUsagePerc are num_requests_running, num_requests_waiting and
	// kv_cache_usage_perc (a fraction 0..1); nil when the scrape did not carry them.
	Running, Waiting, KVCacheUsagePerc *float64
	// Gauges, Counters and Histograms hold every other kept series by key (see the package doc).
	Gauges     map[string]float64
	Counters   map[string]float64
	Histograms map[string]schema.Histogram
}

// Decode reads an exposition in the format contentType names (an HTTP Content-Type value); an
// empty or unknown content type is read as Prometheus text. It returns the families in the order
// read, or the first decoding error with the family it stopped at.
func Decode(r io.Reader, contentType string) ([]*dto.MetricFamily, error) {
	format := expfmt.FmtText
	if contentType != "" {
		h := map[string][]string{"Content-Type": {contentType}}
		if f := expfmt.ResponseFormat(h); f != expfmt.FmtUnknown {
			format = f
		} else if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt != "text/plain" {
			return nil, fmt.Errorf("decode metrics: unsupported content type %q", contentType)
		}
	}
	if format.FormatType() == expfmt.TypeOpenMetrics {
		text, err := openMetricsToText(io.LimitReader(r, MaxExpositionBytes+1))
		if err != nil {
			return nil, fmt.Errorf("decode metrics (%s): %w", format, err)
		}
		r, format = text, expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(r, format)
	var fams []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			after := ""
			if n := len(fams); n > 0 {
				after = fmt.Sprintf(" after family %q", fams[n-1].GetName())
			}
			return nil, fmt.Errorf("decode metrics (%s)%s: %w", format, after, err)
		}
		fams = append(fams, mf)
	}
}

// Parse is [Decode] followed by [Convert].
func Parse(r io.Reader, contentType string) ([]EngineMetrics, error) {
	fams, err := Decode(r, contentType)
	if err != nil {
		return nil, err
	}
	return Convert(fams), nil
}

// CanonicalName returns the key name of a family (without labels): the prefix removed, "_total"
// added to a counter that lacks it (OpenMetrics names counters without it), and an old name
// replaced by its V1 successor (help is the family's HELP text, which tells the unit of the
// prefix-cache counters). kept is false for families that are not kept; legacy is true when the
// name was an old one.
func CanonicalName(family string, typ dto.MetricType, help string) (name string, kept, legacy bool) {
	switch {
	case strings.HasPrefix(family, "vllm:"):
		name = family[len("vllm:"):]
	case strings.HasPrefix(family, "vllm_"):
		name = family[len("vllm_"):]
	case strings.HasPrefix(family, "process_"):
		name = family
	default:
		return "", false, false
	}
	if name == "" || strings.HasSuffix(name, "_info") || strings.HasSuffix(name, "_created") {
		return "", false, false
	}
	if typ == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total") {
		name += "_total"
	}
	name, legacy = v1Name(name, help)
	return name, true, legacy
}

// Convert groups the families' series by engine label and maps their names (see the package
// doc). Non-finite values are dropped: JSON cannot carry them and they mean "no value". The result
// is sorted by engine index; it is empty when no vLLM family was present.
func Convert(fams []*dto.MetricFamily) []EngineMetrics {
	byEngine := map[string]*EngineMetrics{}
	// fromLegacy remembers keys filled from an old name, so the V1 name overrides them in
	// whichever order the families come.
	fromLegacy := map[string]map[string]bool{}
	get := func(idx string) *EngineMetrics {
		em, ok := byEngine[idx]
		if !ok {
			em = &EngineMetrics{
				EngineIndex: idx,
				Gauges:      map[string]float64{},
				Counters:    map[string]float64{},
				Histograms:  map[string]schema.Histogram{},
			}
			byEngine[idx] = em
			fromLegacy[idx] = map[string]bool{}
		}
		return em
	}
	for _, mf := range fams {
		name, kept, legacy := CanonicalName(mf.GetName(), mf.GetType(), mf.GetHelp())
		if !kept {
			continue
		}
		// inFamily marks the keys this family already set, so the per-process series of one
		// multiprocess gauge (told apart only by pid) fold into one value.
		inFamily := map[string]bool{}
		for _, m := range mf.GetMetric() {
			idx, model, extra := splitLabels(m.GetLabel())
			em := get(idx)
			if em.Model == "" {
				em.Model = model
			}
			key := name + extra
			if len(key) > MaxKeyBytes {
				continue
			}
			seen := fromLegacy[idx]
			if !legacy && seen[key] {
				delete(seen, key)
				removeKey(em, key)
			} else if legacy && hasKey(em, key) && !seen[key] {
				continue
			}
			if len(em.Gauges)+len(em.Counters)+len(em.Histograms) >= maxSeries && !hasKey(em, key) {
				continue
			}
			fk := idx + "\x00" + key
			if inFamily[fk] {
				foldGauge(em, mf.GetType(), key, m)
				continue
			}
			if put(em, mf.GetType(), key, m) {
				inFamily[fk] = true
				if legacy {
					seen[key] = true
				}
			}
		}
	}
	// Series without an engine label (process_*, and everything in V0) describe the whole
	// server; when engines are labelled, each engine gets them.
	if shared, ok := byEngine[""]; ok && len(byEngine) > 1 {
		delete(byEngine, "")
		for _, em := range byEngine {
			mergeMissing(em, shared)
		}
	}
	out := make([]EngineMetrics, 0, len(byEngine))
	for _, em := range byEngine {
		lift(em)
		out = append(out, *em)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].EngineIndex, out[j].EngineIndex
		if len(a) != len(b) {
			return len(a) < len(b)
		}
		return a < b
	})
	return out
}

// put stores one series under key; it reports whether a value was stored.
func put(em *EngineMetrics, typ dto.MetricType, key string, m *dto.Metric) bool {
	switch typ {
	case dto.MetricType_COUNTER:
		return putFloat(em.Counters, key, m.GetCounter().GetValue())
	case dto.MetricType_GAUGE:
		return putFloat(em.Gauges, key, m.GetGauge().GetValue())
	case dto.MetricType_UNTYPED:
		return putFloat(em.Gauges, key, m.GetUntyped().GetValue())
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h, ok := histogram(m.GetHistogram())
		if ok {
			em.Histograms[key] = h
		}
		return ok
	}
	// Summaries: vLLM exposes none; their quantiles have no place in a cumulative column.
	return false
}

// foldGauge merges another process's series of a gauge already stored under key: the largest
// value is kept (a multiprocess "all" gauge has one series per process and no way to tell the
// most recent one). Other types never repeat a key within a family.
func foldGauge(em *EngineMetrics, typ dto.MetricType, key string, m *dto.Metric) {
	var v float64
	switch typ {
	case dto.MetricType_GAUGE:
		v = m.GetGauge().GetValue()
	case dto.MetricType_UNTYPED:
		v = m.GetUntyped().GetValue()
	default:
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if old, ok := em.Gauges[key]; !ok || v > old {
		em.Gauges[key] = v
	}
}

func putFloat(dst map[string]float64, key string, v float64) bool {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return false
	}
	dst[key] = v
	return true
}

func histogram(h *dto.Histogram) (schema.Histogram, bool) {
	count := float64(h.GetSampleCount())
	if h.SampleCountFloat != nil {
		count = h.GetSampleCountFloat()
	}
	sum := h.GetSampleSum()
	if math.IsNaN(sum) || math.IsInf(sum, 0) || math.IsNaN(count) || math.IsInf(count, 0) {
		return schema.Histogram{}, false
	}
	out := schema.Histogram{Sum: sum, Count: count}
	hasInf := false
	for _, b := range h.GetBucket() {
		c := float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		le := b.GetUpperBound()
		if math.IsNaN(le) || math.IsNaN(c) || math.IsInf(c, 0) {
			continue
		}
		if math.IsInf(le, 1) {
			hasInf = true
		}
		out.Buckets = append(out.Buckets, schema.Bucket{LE: schema.FloatOrInf(le), Count: c})
	}
	sort.SliceStable(out.Buckets, func(i, j int) bool { return out.Buckets[i].LE < out.Buckets[j].LE })
	if !hasInf {
		// The text format's +Inf bucket equals the count; decoders may fold it away.
		out.Buckets = append(out.Buckets, schema.Bucket{LE: schema.FloatOrInf(math.Inf(1)), Count: count})
	}
	if len(out.Buckets) > 200 {
		out.Buckets = append(out.Buckets[:199], out.Buckets[len(out.Buckets)-1])
	}
	return out, true
}

// splitLabels separates vLLM's engine and model_name labels from the distinguishing ones, which
// it renders sorted as {a="x",b="y"}; prometheus_client's multiprocess pid label is dropped.
func splitLabels(labels []*dto.LabelPair) (engine, model, extra string) {
	var rest []*dto.LabelPair
	for _, l := range labels {
		switch l.GetName() {
		case "engine":
			engine = l.GetValue()
		case "model_name":
			model = l.GetValue()
		case "pid":
		default:
			rest = append(rest, l)
		}
	}
	if len(rest) == 0 {
		return engine, model, ""
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].GetName() < rest[j].GetName() })
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range rest {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(l.GetValue()))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return engine, model, b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func hasKey(em *EngineMetrics, key string) bool {
	if _, ok := em.Gauges[key]; ok {
		return true
	}
	if _, ok := em.Counters[key]; ok {
		return true
	}
	_, ok := em.Histograms[key]
	return ok
}

func mergeMissing(dst, src *EngineMetrics) {
	if dst.Model == "" {
		dst.Model = src.Model
	}
	for k, v := range src.Gauges {
		if !hasKey(dst, k) {
			dst.Gauges[k] = v
		}
	}
	for k, v := range src.Counters {
		if !hasKey(dst, k) {
			dst.Counters[k] = v
		}
	}
	for k, v := range src.Histograms {
		if !hasKey(dst, k) {
			dst.Histograms[k] = v
		}
	}
}

func removeKey(em *EngineMetrics, key string) {
	delete(em.Gauges, key)
	delete(em.Counters, key)
	delete(em.Histograms, key)
}

// lift moves the three headline gauges out of Gauges into their own fields.
func lift(em *EngineMetrics) {
	take := func(key string) *float64 {
		v, ok := em.Gauges[key]
		if !ok {
			return nil
		}
		delete(em.Gauges, key)
		return &v
	}
	em.Running = take(NumRequestsRunning)
	em.Waiting = take(NumRequestsWaiting)
	em.KVCacheUsagePerc = take(KVCacheUsagePerc)
}
