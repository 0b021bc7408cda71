// Package synth generates synthetic serving traffic — the gateway's request.started and
// request.finished events, applications' app.record events and the collector's engine.sample
// events — for testing the detector on normal days and on the incidents it must catch.
//
// Traffic is schema events, so the same traffic can be published through NATS (Events) or written
// straight into the landing tables (Insert). Generation is deterministic for a seed.
package synth

import (
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/servescope/servescope/schema"
)

// Traffic is a set of events of the kinds the detector reads.
type Traffic struct {
	Started  []*schema.RequestStarted
	Finished []*schema.RequestFinished
	Apps     []*schema.AppRecord
	Samples  []*schema.EngineSample
}

// Add appends o's events to t and returns t.
func (t *Traffic) Add(o *Traffic) *Traffic {
	t.Started = append(t.Started, o.Started...)
	t.Finished = append(t.Finished, o.Finished...)
	t.Apps = append(t.Apps, o.Apps...)
	t.Samples = append(t.Samples, o.Samples...)
	return t
}

// Len is the number of events.
func (t *Traffic) Len() int { return len(t.Started) + len(t.Finished) + len(t.Apps) + len(t.Samples) }

// Events returns every event ordered by its ts (the order a live system would publish them).
func (t *Traffic) Events() []schema.Event {
	out := make([]schema.Event, 0, t.Len())
	for _, e := range t.Started {
		out = append(out, e)
	}
	for _, e := range t.Finished {
		out = append(out, e)
	}
	for _, e := range t.Apps {
		out = append(out, e)
	}
	for _, e := range t.Samples {
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Head().TS.Before(out[j].Head().TS) })
	return out
}

// Shape is the distribution each generated request is drawn from. Durations are seconds.
type Shape struct {
	Model, App, Endpoint                string
	EmbeddingModelVersion, IndexVersion string
	// TopScore and TopScoreSD: the top retrieval score is normal(TopScore, TopScoreSD) clipped to
	// [0, 1]; TopScore 0 means the app records no retrieval.
	TopScore, TopScoreSD float64
	// ViolationProb is the chance an answer has letters outside the allowed scripts.
	ViolationProb float64
	// LengthProb is the chance an answer stops at max_tokens (finish_reason "length").
	LengthProb float64
	// Status4xxProb and Status5xxProb are the chances of a 400 and a 500 answer.
	Status4xxProb, Status5xxProb float64
	// TTFTSeconds and TPOTSeconds are medians; each request multiplies them by a log-normal factor of sigma
	// Jitter. CompletionTokens is the mean output length.
	TTFTSeconds, TPOTSeconds float64
	Jitter                   float64
	CompletionTokens         int
	// QueueProb is the chance a request waited QueueSeconds seconds before prefill.
	QueueProb, QueueSeconds float64
	// UnfinishedProb is the chance a request starts and never finishes (no request.finished).
	UnfinishedProb float64
	// PromptTokens is each answered request's input token count and CachedTokens the part of it
	// the prefix cache served (0: not recorded, as the gateway leaves them when the engine does
	// not say).
	PromptTokens, CachedTokens int
}

// NormalShape is a healthy RAG chat service, close to the normal workload of docs/measurements.md
// (TTFT about 0.05 s, 16 ms between tokens, 128 output tokens, top passage score about 0.88).
func NormalShape() Shape {
	return Shape{
		Model: "Qwen/Qwen2.5-7B-Instruct-AWQ", App: "docs-qa", Endpoint: "/v1/chat/completions",
		EmbeddingModelVersion: "bge-m3@1", IndexVersion: "idx-2026-11-01",
		TopScore: 0.88, TopScoreSD: 0.04,
		ViolationProb: 0.001, LengthProb: 0.02, Status4xxProb: 0.01,
		TTFTSeconds: 0.05, TPOTSeconds: 0.016, Jitter: 0.15, CompletionTokens: 128,
	}
}

// How a request's answer length is drawn: log-normal around Shape.CompletionTokens with this
// log-space standard deviation, under a max_tokens of MaxTokensPerCompletion times it (the
// clients of a normal day leave their answers room; Shape.LengthProb of them still hit it).
// scripts/demo starts vllmsim with the same distribution (--output-len-median, --output-len-sigma)
// and its loads ask the same max_tokens, so its traffic agrees with this baseline.
const (
	CompletionTokensSigma  = 0.2
	MaxTokensPerCompletion = 4
)

// Generator draws traffic from a seeded random source.
type Generator struct {
	rng *rand.Rand
	seq uint64
}

// New returns a generator; equal seeds give equal traffic (apart from event and request ids).
func New(seed uint64) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Rate is an arrival rate in requests per second at a time.
type Rate func(time.Time) float64

// Constant is a fixed rate.
func Constant(perSecond float64) Rate { return func(time.Time) float64 { return perSecond } }

// Daily is a rate with daily seasonality: mean perSecond, peaking at 14:00 UTC and lowest at
// 02:00 UTC, swinging by ±amplitude (a fraction of the mean).
func Daily(perSecond, amplitude float64) Rate {
	return func(t time.Time) float64 {
		h := float64(t.UTC().Hour()) + float64(t.UTC().Minute())/60
		return perSecond * (1 + amplitude*math.Cos(2*math.Pi*(h-14)/24))
	}
}

// Requests generates the traffic of [from, to): requests arriving in it as a Poisson process of
// the given rate, each with all its events before to. A request that would still be running at to
// (its answer or app record at or after to) is left out, with the random draws it took, so that
// consecutive periods never mix: an incident generated for [from, to) after Normal traffic up to
// from is alone in every window that starts at from, whatever the rate was just before from.
// Requests that never finish (Shape.UnfinishedProb) are kept: they are in flight at to by design.
func (g *Generator) Requests(from, to time.Time, rate Rate, s Shape) *Traffic {
	t := &Traffic{}
	at := from
	for {
		r := rate(at)
		if r <= 0 {
			at = at.Add(time.Second)
		} else {
			at = at.Add(time.Duration(g.rng.ExpFloat64() / r * float64(time.Second)))
		}
		if !at.Before(to) {
			return t
		}
		g.request(t, at, s, to)
	}
}

// RequestsN generates exactly n requests spread evenly over [from, to); their answers may come
// after to.
func (g *Generator) RequestsN(from, to time.Time, n int, s Shape) *Traffic {
	t := &Traffic{}
	step := to.Sub(from) / time.Duration(n)
	for i := range n {
		g.request(t, from.Add(step*time.Duration(i)+step/2), s, time.Time{})
	}
	return t
}

func (g *Generator) jitter(median, sigma float64) float64 {
	return median * math.Exp(g.rng.NormFloat64()*sigma)
}

// request draws one request arriving at arrival and appends its events to t, unless end is set and
// the request's last event would come at or after it.
func (g *Generator) request(t *Traffic, arrival time.Time, s Shape, end time.Time) {
	g.seq++
	id := schema.NewRequestID()
	maxTokens := uint32(s.CompletionTokens * MaxTokensPerCompletion)
	st := schema.NewRequestStarted(id, arrival)
	st.Model, st.Endpoint, st.Stream, st.MaxTokens = s.Model, s.Endpoint, true, &maxTokens
	st.App, st.IndexVersion, st.EmbeddingModelVersion = s.App, s.IndexVersion, s.EmbeddingModelVersion

	var retrievalS float64
	if s.TopScore > 0 {
		retrievalS = g.jitter(0.02, 0.3)
	}
	if g.rng.Float64() < s.UnfinishedProb {
		t.Started = append(t.Started, st)
		return
	}
	queue := 0.0
	if g.rng.Float64() < s.QueueProb {
		queue = g.jitter(s.QueueSeconds, s.Jitter)
	}
	status := uint16(200)
	switch u := g.rng.Float64(); {
	case u < s.Status5xxProb:
		status = 500
	case u < s.Status5xxProb+s.Status4xxProb:
		status = 400
	}
	tokens := uint32(max(1, int(float64(s.CompletionTokens)*math.Exp(g.rng.NormFloat64()*CompletionTokensSigma))))
	finish := "stop"
	if g.rng.Float64() < s.LengthProb {
		tokens, finish = maxTokens, "length"
	}
	ttft := queue + g.jitter(s.TTFTSeconds, s.Jitter)
	tpot := g.jitter(s.TPOTSeconds, s.Jitter)
	e2e := ttft + tpot*float64(tokens-1)
	if status != 200 {
		e2e, tokens, finish = g.jitter(0.01, 0.3), 0, ""
	}
	finished := arrival.Add(time.Duration((e2e + retrievalS) * float64(time.Second)))
	f := schema.NewRequestFinished(id, arrival, finished)
	keep := end.IsZero() || finished.Before(end)
	f.Model, f.Endpoint, f.Stream, f.StatusCode, f.MaxTokens = s.Model, s.Endpoint, true, status, &maxTokens
	f.App, f.IndexVersion, f.EmbeddingModelVersion = s.App, s.IndexVersion, s.EmbeddingModelVersion
	f.E2ESeconds = ptr(e2e)
	if status == 200 {
		f.TTFTSeconds, f.TPOTSeconds, f.QueueSeconds = ptr(ttft), ptr(tpot), ptr(queue)
		f.CompletionTokens, f.FinishReason = &tokens, finish
		if s.PromptTokens > 0 {
			in := uint32(s.PromptTokens)
			f.PromptTokens = &in
			if s.CachedTokens > 0 {
				c := uint32(s.CachedTokens)
				f.CachedTokens = &c
			}
		}
		foreign, violation := uint32(0), g.rng.Float64() < s.ViolationProb
		if violation {
			foreign = uint32(1 + g.rng.IntN(40))
		}
		f.OutputForeignChars, f.OutputScriptViolation = &foreign, &violation
	} else {
		f.ErrorLayer, f.ErrorMessage = schema.LayerUpstream, "synthetic error"
	}

	var a *schema.AppRecord
	if s.TopScore > 0 {
		a = schema.NewAppRecord(id, s.App, finished)
		a.Model, a.IndexVersion, a.EmbeddingModelVersion = s.Model, s.IndexVersion, s.EmbeddingModelVersion
		top := min(1, max(0, s.TopScore+g.rng.NormFloat64()*s.TopScoreSD))
		ps := make([]schema.Passage, 3)
		for i := range ps {
			ps[i] = schema.Passage{ID: "p" + string(rune('a'+g.rng.IntN(26))), Score: top - float64(i)*0.05*g.rng.Float64()}
		}
		a.SetPassages(ps)
		a.RetrievalSeconds = ptr(retrievalS)
		if f.OutputScriptViolation != nil {
			a.OutputForeignChars, a.OutputScriptViolation = f.OutputForeignChars, f.OutputScriptViolation
		}
	}
	if !keep {
		return
	}
	t.Started = append(t.Started, st)
	t.Finished = append(t.Finished, f)
	if a != nil {
		t.Apps = append(t.Apps, a)
	}
}

// EngineShape describes one vLLM engine's scraped gauges; each function gives the level at a time
// and the generator adds noise. KV cache usage is a fraction 0..1.
type EngineShape struct {
	Engine, Model string
	Every         time.Duration
	Running       func(time.Time) float64
	Waiting       func(time.Time) float64
	KVCache       func(time.Time) float64
	// Noise is the standard deviation of a sample around Running (relative) and KVCache (absolute).
	Noise float64
}

// NormalEngine is an engine under rate's load with E2E about e2eS seconds: running follows
// Little's law (rate × E2E), nothing waits, and each running sequence holds about 0.1% of the KV cache.
func NormalEngine(rate Rate, e2eS float64) EngineShape {
	return EngineShape{
		Engine: "http://vllm-0:8000", Model: "Qwen/Qwen2.5-7B-Instruct-AWQ", Every: 15 * time.Second,
		Running: func(t time.Time) float64 { return rate(t) * e2eS },
		Waiting: func(time.Time) float64 { return 0 },
		KVCache: func(t time.Time) float64 { return 0.005 + rate(t)*e2eS*0.001 },
		Noise:   0.2,
	}
}

// Samples generates engine.sample events every es.Every in [from, to).
func (g *Generator) Samples(from, to time.Time, es EngineShape) *Traffic {
	t := &Traffic{}
	for at := from; at.Before(to); at = at.Add(es.Every) {
		s := schema.NewEngineSample(es.Engine, at)
		s.Model, s.Up = es.Model, true
		running := math.Round(max(0, es.Running(at)*(1+g.rng.NormFloat64()*es.Noise)))
		waiting := math.Round(max(0, es.Waiting(at)))
		kv := min(1, max(0, es.KVCache(at)+g.rng.NormFloat64()*es.Noise*0.005))
		s.NumRequestsRunning, s.NumRequestsWaiting, s.KVCacheUsagePerc = ptr(running), ptr(waiting), ptr(kv)
		s.ScrapeDurationSeconds = ptr(0.004)
		t.Samples = append(t.Samples, s)
	}
	return t
}

func ptr[T any](v T) *T { return &v }
