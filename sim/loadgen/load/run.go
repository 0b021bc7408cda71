package load

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/servescope/servescope/sim/loadgen/enginestats"
)

// Run executes one load run and returns its report. It returns an error only when the run
// cannot start (bad configuration, no model, prompts cannot be built with /tokenize) or ctx is
// cancelled before it ends; request failures are counted in the report, never returned.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	r, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	model := r.Model
	if model == "" {
		if model, err = r.discoverModel(ctx); err != nil {
			return nil, err
		}
	}
	tk := &tokenizer{client: r.HTTPClient, url: r.Target + "/tokenize", model: model, chat: r.Endpoint == "chat"}
	prompts, err := buildPrompts(ctx, tk, r.total, r.scenario.PromptTokens, r.samePrompt)
	if err != nil {
		return nil, err
	}
	if r.Prepared != nil {
		r.Prepared(r.total)
	}

	rep := &Report{
		Scenario: r.scenario.Name, Target: r.Target, Model: model, Endpoint: r.Endpoint,
		Stream: r.streamShare == 1, StreamShare: r.streamShare,
		TimeScale: r.TimeScale, RateRPS: r.scenario.Rate, PromptTokensTarget: r.scenario.PromptTokens,
		MaxTokens: r.scenario.MaxTokens, Planned: r.total, Errors: map[string]int{}, FinishReasons: map[string]int{},
		TokenizeCalls: tk.calls, Arrival: r.Arrival,
	}
	metricsOn := r.MetricsURL != "none"
	var before enginestats.Snapshot
	if metricsOn {
		if before, err = enginestats.Scrape(ctx, r.HTTPClient, r.MetricsURL); err != nil {
			rep.EngineError = err.Error()
			metricsOn = false
		}
	}
	maxima := enginestats.Maxima{}
	samples := 0
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	if metricsOn {
		maxima.Observe(before)
		go func() {
			defer close(samplerDone)
			tick := time.NewTicker(max(r.wall(r.SampleInterval), 20*time.Millisecond))
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					if s, err := enginestats.Scrape(ctx, r.HTTPClient, r.MetricsURL); err == nil {
						maxima.Observe(s)
						samples++
					}
				case <-stopSampler:
					return
				}
			}
		}()
	} else {
		close(samplerDone)
	}

	results := make([]result, r.total)
	sem := make(chan struct{}, r.Concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	start := time.Now()
	cancelled := false
dispatch:
	for i := 0; i < r.total; i++ {
		at := start.Add(r.wall(r.offsets[i]))
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				cancelled = true
				break dispatch
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			cancelled = true
			break dispatch
		}
		wg.Add(1)
		rep.Sent++
		stream := r.streams(i)
		if stream {
			rep.Streamed++
		}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = r.send(ctx, model, prompts[i], stream)
			mu.Lock()
			done++
			n := done
			mu.Unlock()
			if r.Progress != nil {
				r.Progress(n, r.total)
			}
		}(i)
	}
	wg.Wait()
	rep.WallSeconds = time.Since(start).Seconds()
	close(stopSampler)
	<-samplerDone
	if cancelled {
		return nil, fmt.Errorf("run cancelled after %d of %d requests: %w", rep.Sent, r.total, ctx.Err())
	}
	rep.summarize(results[:rep.Sent], r.TimeScale)
	if metricsOn {
		after, err := enginestats.Scrape(ctx, r.HTTPClient, r.MetricsURL)
		if err != nil {
			rep.EngineError = err.Error()
		} else {
			maxima.Observe(after)
			rep.Engine = engineReport(before, after, maxima, samples)
		}
	}
	return rep, nil
}

func (r *resolved) discoverModel(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Target+"/v1/models", nil)
	if err != nil {
		return "", fmt.Errorf("build model list request: %w", err)
	}
	resp, err := r.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("list models at %s: %w", r.Target, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("list models at %s: HTTP %d", r.Target, resp.StatusCode)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("list models at %s: no model in %.200s", r.Target, raw)
	}
	return list.Data[0].ID, nil
}

// quantile is the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func latencyOf(v []float64) *Latency {
	if len(v) == 0 {
		return nil
	}
	sort.Float64s(v)
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return &Latency{Count: len(v), Mean: sum / float64(len(v)), P50: quantile(v, 0.5), P95: quantile(v, 0.95), P99: quantile(v, 0.99)}
}

func (rep *Report) summarize(results []result, scale float64) {
	var ttft, tpot, e2e []float64
	var in, out int
	for _, res := range results {
		if res.errKind != "" {
			rep.Errors[res.errKind]++
			rep.Failed++
			if len(rep.ErrorSamples) < 5 {
				rep.ErrorSamples = append(rep.ErrorSamples, fmt.Sprintf("%s: %.300s", res.errKind, res.errMessage))
			}
			continue
		}
		rep.Succeeded++
		if res.finishReason != "" {
			rep.FinishReasons[res.finishReason]++
		}
		e2e = append(e2e, res.e2e*scale)
		if res.ttft > 0 {
			ttft = append(ttft, res.ttft*scale)
			if res.completionTokens > 1 {
				tpot = append(tpot, (res.e2e-res.ttft)*scale/float64(res.completionTokens-1))
			}
		}
		in += res.promptTokens
		out += res.completionTokens
	}
	rep.TTFT, rep.TPOT, rep.E2E = latencyOf(ttft), latencyOf(tpot), latencyOf(e2e)
	rep.PromptTokens, rep.CompletionTokens = in, out
	if rep.Succeeded > 0 {
		rep.PromptTokensMean = float64(in) / float64(rep.Succeeded)
		rep.CompletionTokensMean = float64(out) / float64(rep.Succeeded)
	}
}

func engineReport(before, after enginestats.Snapshot, maxima enginestats.Maxima, samples int) *EngineReport {
	e := &EngineReport{Samples: samples}
	mean := func(name string) *float64 {
		if m, _, ok := enginestats.Mean(before, after, name); ok {
			return &m
		}
		return nil
	}
	if _, n, ok := enginestats.Mean(before, after, enginestats.E2ELatency); ok {
		e.Requests = n
	}
	e.PromptTokens = mean(enginestats.PromptTokens)
	e.GenerationTokens = mean(enginestats.GenerationTokens)
	e.QueueSeconds = mean(enginestats.QueueTime)
	e.PrefillSeconds = mean(enginestats.PrefillTime)
	e.TTFTSeconds = mean(enginestats.TTFT)
	e.InterTokenSeconds = mean(enginestats.InterTokenLat)
	if e.InterTokenSeconds == nil {
		e.InterTokenSeconds = mean(enginestats.InterTokenLatV0)
	}
	e.DecodeSeconds = mean(enginestats.DecodeTime)
	e.E2ESeconds = mean(enginestats.E2ELatency)
	e.MaxRunning = maxima[enginestats.Running]
	e.MaxWaiting = maxima[enginestats.Waiting]
	e.MaxKVCacheUsagePerc = 100 * maxima[enginestats.KVCacheUsage]
	return e
}
