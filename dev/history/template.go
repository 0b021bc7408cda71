package history

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"sort"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/scrape"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/simmetrics"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

type discard struct{}

func (discard) Publish(schema.Event) error { return nil }

// SampleTemplate scrapes vllmsim's /metrics in vLLM main's format the way the collector does and
// returns the sample's shape, so generated samples carry the keys and bucket bounds a real
// engine.sample has (and follow vllmsim when it changes).
func SampleTemplate() (Template, error) {
	g := engine.Gauges{Running: 20, KVCacheUsage: 0.025}
	m := simmetrics.NewRelease("Qwen/Qwen2.5-7B-Instruct-AWQ", 4096, func() engine.Gauges { return g }, vllmversion.Main)
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	s, err := scrape.New(nil, discard{}, scrape.Config{})
	if err != nil {
		return Template{}, fmt.Errorf("sample template: %w", err)
	}
	evs := s.Scrape(context.Background(), scrape.Target{URL: srv.URL, Engine: "vllm-0"})
	if len(evs) != 1 || !evs[0].Up {
		return Template{}, fmt.Errorf("sample template: scraping vllmsim gave %d samples", len(evs))
	}
	e := evs[0]
	t := Template{Histograms: map[string][]float64{}}
	for k := range e.Gauges {
		t.Gauges = append(t.Gauges, k)
	}
	for k := range e.Counters {
		t.Counters = append(t.Counters, k)
	}
	sort.Strings(t.Gauges)
	sort.Strings(t.Counters)
	for name, h := range e.Histograms {
		for _, b := range h.Buckets {
			t.Histograms[name] = append(t.Histograms[name], float64(b.LE))
		}
		if n := len(t.Histograms[name]); n == 0 || !math.IsInf(t.Histograms[name][n-1], 1) {
			t.Histograms[name] = append(t.Histograms[name], math.Inf(1))
		}
	}
	return t, nil
}
