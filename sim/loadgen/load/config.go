// Package load is loadgen's core: an open-loop load generator for OpenAI-compatible LLM
// servers (vLLM, vllmsim, or servescope's gateway in front of either) that reproduces the four
// workloads of docs/measurements.md and reports the figures of its table.
//
// Run sends requests at a fixed arrival rate regardless of how fast the server answers (open
// loop; a concurrency cap can bound in-flight requests), builds prompts of an exact token count
// with the server's POST /tokenize (never by repeating text a fixed number of times), counts every
// failure per request by status code or kind and never stops on one, and reads the server's
// /metrics before and after the run and every 0.5 s during it. Only the standard OpenAI API,
// vLLM's /tokenize and /metrics are used, so it works against a real vLLM unchanged.
//
// Time scale: against vllmsim running with --time-scale N, pass the same N. Arrival rate,
// duration and sampling period are then understood in simulated time (the wall run is N times
// shorter) and client-side latencies are multiplied by N so every figure reads in simulated
// seconds, comparable with the engine's own metrics.
package load

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// Scenario is a named workload.
type Scenario struct {
	Name         string
	Rate         float64       // requests per second
	PromptTokens int           // prompt size in tokens, chat template included
	MaxTokens    int           // max_tokens of each request
	Duration     time.Duration // arrival window
	// SamePrompt sends one prompt for every request (so the prefix cache serves it); otherwise
	// every request gets its own prompt.
	SamePrompt bool
}

// Scenarios are the four workloads of docs/measurements.md. Their durations are long enough for the
// overload scenario to fill the engine's 256 slots and queue the excess.
var Scenarios = map[string]Scenario{
	"normal":      {Name: "normal", Rate: 2, PromptTokens: 44, MaxTokens: 128, Duration: 30 * time.Second},
	"overload":    {Name: "overload", Rate: 14, PromptTokens: 44, MaxTokens: 128, Duration: 35 * time.Second},
	"long-prompt": {Name: "long-prompt", Rate: 1, PromptTokens: 2905, MaxTokens: 64, Duration: 30 * time.Second, SamePrompt: true},
	"long-output": {Name: "long-output", Rate: 1, PromptTokens: 44, MaxTokens: 1024, Duration: 60 * time.Second},
}

// ScenarioNames lists the accepted scenario names, custom included.
func ScenarioNames() []string {
	return []string{"normal", "overload", "long-prompt", "long-output", "custom"}
}

// Config describes a run. Zero values take the scenario's defaults.
type Config struct {
	Target     string // base URL of the server, e.g. http://127.0.0.1:8000
	MetricsURL string // engine /metrics URL; default Target + "/metrics"; "none" disables
	Scenario   string // normal, overload, long-prompt, long-output or custom
	Model      string // default: the first model of GET /v1/models
	// Endpoint is "chat" (POST /v1/chat/completions, default) or "completions".
	Endpoint     string
	Rate         float64       // requests per second (simulated time)
	Duration     time.Duration // arrival window (simulated time); ignored when Requests > 0
	Requests     int           // number of requests; 0 = Rate × Duration
	PromptTokens int
	MaxTokens    int
	// Stream selects streaming responses; nil means true (TTFT and TPOT need a stream).
	Stream *bool
	// StreamShare is the share of requests sent with "stream": true, from 0 to 1, spread evenly
	// over the run (request i streams when ⌈(i+1)·share⌉ > ⌈i·share⌉: the first one does, and n
	// requests carry ⌈n·share⌉ streams); the others ask for one JSON body, whose TTFT the client
	// cannot see but the engine and the gateway record. nil: all of them when Stream is nil or
	// true, none when false. Set Stream or StreamShare, not both.
	StreamShare *float64
	// SamePrompt overrides the scenario's prompt sharing when set.
	SamePrompt *bool
	// IgnoreEOS sends vLLM's ignore_eos so every answer runs to max_tokens as in the measured runs
	// (docs/measurements.md); nil means true.
	IgnoreEOS *bool
	// Arrival is "poisson" (default: exponential gaps, as independent users arrive) or
	// "uniform" (equal gaps).
	Arrival string
	// Seed makes Poisson arrivals reproducible; 0 means 1.
	Seed        uint64
	Concurrency int     // cap on in-flight requests; 0 = 4096
	TimeScale   float64 // the server's --time-scale; 0 = 1
	// SampleInterval is the gauge sampling period in simulated time; 0 = 0.5 s.
	SampleInterval time.Duration
	// RequestTimeout bounds one request in wall time; 0 = 10 minutes.
	RequestTimeout time.Duration
	HTTPClient     *http.Client
	// Progress, when set, is called after each request ends with the number ended and the
	// total planned.
	Progress func(done, total int)
	// Prepared, when set, is called once prompts are built, before the first request is sent.
	Prepared func(total int)
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// resolved is a Config with every default applied.
type resolved struct {
	Config
	scenario    Scenario
	streamShare float64 // share of requests that stream, 0..1
	samePrompt  bool
	ignoreEOS   bool
	total       int
	offsets     []time.Duration // arrival of each request from the start, simulated time
}

// arrivals lays out the requests' send times: n of them when n > 0, else every arrival within
// d. Poisson gaps are drawn from a seeded generator so runs are repeatable.
func arrivals(kind string, rate float64, d time.Duration, n int, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var out []time.Duration
	t := 0.0
	for i := 0; ; i++ {
		if kind == "uniform" {
			t = float64(i) / rate
		} else if i > 0 {
			t += rng.ExpFloat64() / rate
		}
		at := time.Duration(t * float64(time.Second))
		if (n > 0 && i >= n) || (n == 0 && at >= d) {
			return out
		}
		out = append(out, at)
	}
}

func resolve(cfg Config) (resolved, error) {
	r := resolved{Config: cfg}
	if cfg.Target == "" {
		return r, fmt.Errorf("target URL is required")
	}
	r.Target = strings.TrimRight(cfg.Target, "/")
	name := cfg.Scenario
	if name == "" {
		name = "custom"
	}
	sc, ok := Scenarios[name]
	if !ok {
		if name != "custom" {
			return r, fmt.Errorf("unknown scenario %q (want one of %s)", name, strings.Join(ScenarioNames(), ", "))
		}
		sc = Scenarios["normal"]
		sc.Name = "custom"
	}
	if cfg.Rate > 0 {
		sc.Rate = cfg.Rate
	}
	if cfg.Duration > 0 {
		sc.Duration = cfg.Duration
	}
	if cfg.PromptTokens > 0 {
		sc.PromptTokens = cfg.PromptTokens
	}
	if cfg.MaxTokens > 0 {
		sc.MaxTokens = cfg.MaxTokens
	}
	if cfg.Rate < 0 || cfg.Duration < 0 || cfg.Requests < 0 || cfg.PromptTokens < 0 || cfg.MaxTokens < 0 || cfg.Concurrency < 0 || cfg.TimeScale < 0 {
		return r, fmt.Errorf("rate, duration, requests, prompt tokens, max tokens, concurrency and time scale must not be negative")
	}
	r.scenario = sc
	switch {
	case cfg.StreamShare != nil && cfg.Stream != nil:
		return r, fmt.Errorf("set stream or stream share, not both")
	case cfg.StreamShare != nil:
		// Written so that NaN fails too.
		if !(*cfg.StreamShare >= 0 && *cfg.StreamShare <= 1) {
			return r, fmt.Errorf("stream share %g: want a share from 0 to 1", *cfg.StreamShare)
		}
		r.streamShare = *cfg.StreamShare
	case boolOr(cfg.Stream, true):
		r.streamShare = 1
	}
	r.samePrompt = boolOr(cfg.SamePrompt, sc.SamePrompt)
	r.ignoreEOS = boolOr(cfg.IgnoreEOS, true)
	if r.TimeScale == 0 {
		r.TimeScale = 1
	}
	if r.Concurrency == 0 {
		r.Concurrency = 4096
	}
	if r.SampleInterval == 0 {
		r.SampleInterval = 500 * time.Millisecond
	}
	if r.RequestTimeout == 0 {
		r.RequestTimeout = 10 * time.Minute
	}
	switch r.Endpoint {
	case "":
		r.Endpoint = "chat"
	case "chat", "completions":
	default:
		return r, fmt.Errorf("endpoint %q: want chat or completions", r.Endpoint)
	}
	if r.MetricsURL == "" {
		r.MetricsURL = r.Target + "/metrics"
	}
	switch r.Arrival {
	case "":
		r.Arrival = "poisson"
	case "poisson", "uniform":
	default:
		return r, fmt.Errorf("arrival %q: want poisson or uniform", r.Arrival)
	}
	if r.Seed == 0 {
		r.Seed = 1
	}
	r.offsets = arrivals(r.Arrival, sc.Rate, sc.Duration, cfg.Requests, r.Seed)
	r.total = len(r.offsets)
	if r.total < 1 {
		return r, fmt.Errorf("the run would send no request (rate %g/s for %s)", sc.Rate, sc.Duration)
	}
	if r.HTTPClient == nil {
		r.HTTPClient = &http.Client{Transport: &http.Transport{
			MaxIdleConns:        r.Concurrency,
			MaxIdleConnsPerHost: r.Concurrency,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	return r, nil
}

// streams reports whether request i (0-based) asks for a stream: the share's requests spread evenly
// over the run, the first one streaming whenever the share is above 0.
func (r *resolved) streams(i int) bool {
	return math.Ceil(float64(i+1)*r.streamShare) > math.Ceil(float64(i)*r.streamShare)
}

// wall converts a simulated duration to the wall duration it takes at the run's time scale.
func (r *resolved) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.TimeScale)
}
