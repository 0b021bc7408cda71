// Package scrape samples vLLM /metrics continuously: one loop per target, each on its own
// interval with a per-target offset (jitter) so several targets are not read in the same instant,
// and every scrape — successful or not — published as an engine.sample. A scrape that fails
// (connection refused, timeout, HTTP error, unparsable body) is published with up=false and the
// error, because an engine that stops answering is itself the signal.
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/services/collector/promparse"
)

// Publisher takes events for delivery; schema/publish's Publisher is one.
type Publisher interface {
	Publish(schema.Event) error
}

// MaxBodyBytes bounds a /metrics response; a bigger one is a failed scrape.
const MaxBodyBytes = 16 << 20

// Target is one /metrics endpoint.
type Target struct {
	// URL is the /metrics URL.
	URL string
	// Engine names the engine in the samples; empty means the URL.
	Engine string
}

func (t Target) name() string {
	if t.Engine != "" {
		return t.Engine
	}
	return t.URL
}

// Config tunes a Scraper.
type Config struct {
	// Interval is the time between two scrapes of one target (default 1 s).
	Interval time.Duration
	// Timeout bounds one scrape (default: the interval, at least 1 s). A scrape longer than the
	// interval delays the next one (the loop's ticker drops missed ticks), so they never pile up.
	Timeout time.Duration
	// Client makes the requests (default: a client with keep-alive and no proxy).
	Client *http.Client
	// Logger gets the scraper's logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer, when set, gets servescope_collector_scrapes_total{engine,result} and
	// servescope_collector_target_up{engine}.
	Registerer prometheus.Registerer
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
	// Guard, when set, runs each target's scrape loop: it calls loop with a context that ends
	// when this collector must stop scraping the target (another collector took it over), and
	// returns when ctx ends. The collector's lease per engine is one (COLLECTOR_LEASE). Nil runs
	// every loop until ctx ends.
	Guard func(ctx context.Context, engine string, loop func(ctx context.Context)) error
}

// Scraper runs the scrape loops.
type Scraper struct {
	targets []Target
	pub     Publisher
	cfg     Config
	scrapes *prometheus.CounterVec
	up      *prometheus.GaugeVec
}

// New returns a Scraper of targets publishing to pub. It fails on a target without a URL or a
// duplicate engine name, and when the metrics cannot be registered.
func New(targets []Target, pub Publisher, cfg Config) (*Scraper, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = max(cfg.Interval, time.Second)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	seen := map[string]bool{}
	for _, t := range targets {
		if t.URL == "" {
			return nil, errors.New("scrape target without a URL")
		}
		if seen[t.name()] {
			return nil, fmt.Errorf("scrape target %q listed twice", t.name())
		}
		seen[t.name()] = true
	}
	s := &Scraper{
		targets: targets, pub: pub, cfg: cfg,
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "servescope_collector_scrapes_total",
			Help: "Scrapes of engine /metrics, by engine and result (ok, error).",
		}, []string{"engine", "result"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "servescope_collector_target_up",
			Help: "1 when the engine's last scrape succeeded, 0 when it failed.",
		}, []string{"engine"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{s.scrapes, s.up} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register scrape metrics: %w", err)
			}
		}
	}
	return s, nil
}

// SetGuard sets Config.Guard; call it before Run.
func (s *Scraper) SetGuard(g func(ctx context.Context, engine string, loop func(ctx context.Context)) error) {
	s.cfg.Guard = g
}

// Run scrapes every target until ctx ends.
func (s *Scraper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, t := range s.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.cfg.Guard == nil {
				s.loop(ctx, t)
				return
			}
			if err := s.cfg.Guard(ctx, t.name(), func(ctx context.Context) { s.loop(ctx, t) }); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Error("scrape guard failed; this collector no longer scrapes the engine", "engine", t.name(), "err", err)
			}
		}()
	}
	wg.Wait()
	return nil
}

// offset spreads targets over the interval by a hash of their name, as Prometheus does: stable
// across restarts, different between targets.
func (s *Scraper) offset(t Target) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(t.name()))
	return time.Duration(h.Sum64() % uint64(s.cfg.Interval))
}

func (s *Scraper) loop(ctx context.Context, t Target) {
	timer := time.NewTimer(s.offset(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return
	case <-timer.C:
	}
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		for _, ev := range s.Scrape(ctx, t) {
			if err := s.pub.Publish(ev); err != nil {
				s.cfg.Logger.Error("publish engine sample", "engine", ev.Engine, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Scrape reads t once and returns its samples: one per engine core the server exposes (see
// promparse), or one with Up false when the scrape failed. A scrape cut short because ctx ended
// returns nothing: the collector is stopping, the engine is not down.
func (s *Scraper) Scrape(ctx context.Context, t Target) []*schema.EngineSample {
	start := s.cfg.Now()
	ems, err := s.fetch(ctx, t)
	dur := s.cfg.Now().Sub(start).Seconds()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		s.scrapes.WithLabelValues(t.name(), "error").Inc()
		s.up.WithLabelValues(t.name()).Set(0)
		ev := schema.NewEngineSample(t.name(), start)
		ev.ScrapeDurationSeconds = &dur
		ev.ScrapeError = schema.Truncate(strings.ToValidUTF8(err.Error(), "\uFFFD"), 8192)
		return []*schema.EngineSample{ev}
	}
	s.scrapes.WithLabelValues(t.name(), "ok").Inc()
	s.up.WithLabelValues(t.name()).Set(1)
	out := make([]*schema.EngineSample, 0, len(ems))
	engines := uint16(min(len(ems), math.MaxUint16))
	for _, em := range ems {
		name := t.name()
		if len(ems) > 1 {
			// Data-parallel engines: one timeline each (see promparse).
			name += "#" + em.EngineIndex
		}
		ev := schema.NewEngineSample(name, start)
		ev.Up = true
		ev.ScrapeDurationSeconds = &dur
		ev.Model = schema.Truncate(em.Model, 256)
		ev.EngineIndex = schema.Truncate(em.EngineIndex, 16)
		ev.Engines = &engines
		ev.NumRequestsRunning = nonNegative(em.Running)
		ev.NumRequestsWaiting = nonNegative(em.Waiting)
		ev.KVCacheUsagePerc = nonNegative(em.KVCacheUsagePerc)
		ev.Gauges, ev.Counters, ev.Histograms = em.Gauges, em.Counters, em.Histograms
		out = append(out, ev)
	}
	if len(out) == 0 {
		// A server that answered without any vLLM metric is up but says nothing; record it.
		ev := schema.NewEngineSample(t.name(), start)
		ev.Up = true
		ev.ScrapeDurationSeconds = &dur
		out = append(out, ev)
	}
	return out
}

func nonNegative(v *float64) *float64 {
	if v == nil || *v < 0 {
		return nil
	}
	return v
}

func (s *Scraper) fetch(ctx context.Context, t Target) ([]promparse.EngineMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	req.Header.Set("Accept", promparse.AcceptHeader)
	req.Header.Set("User-Agent", "servescope-collector")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("scrape %s: HTTP %d: %s", t.URL, resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: read body: %w", t.URL, err)
	}
	if len(body) > MaxBodyBytes {
		return nil, fmt.Errorf("scrape %s: body over %d bytes", t.URL, MaxBodyBytes)
	}
	ems, err := promparse.Parse(bytes.NewReader(body), resp.Header.Get("Content-Type"))
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	return ems, nil
}

// ParseTargets reads COLLECTOR_TARGETS entries: "URL" or "name=URL", so a deployment can give an
// engine a short name.
func ParseTargets(list []string) ([]Target, error) {
	var out []Target
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		t := Target{URL: raw}
		if name, url, ok := strings.Cut(raw, "="); ok && !strings.Contains(name, "/") && !strings.Contains(name, ":") {
			t = Target{Engine: name, URL: url}
		}
		if !strings.HasPrefix(t.URL, "http://") && !strings.HasPrefix(t.URL, "https://") {
			return nil, fmt.Errorf("scrape target %q: want an http(s):// /metrics URL", raw)
		}
		out = append(out, t)
	}
	return out, nil
}
