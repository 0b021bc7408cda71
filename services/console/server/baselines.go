package server

import (
	"context"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/diagnose"
)

// baselines keeps diagnose's baseline of the views the console drew lately, so that every panel of
// a page draws the figures the complaint table shows (internal/panels, {{figure}}): read once per
// view (range and model), by the complaint page's diagnose or by the first panel that asks, and
// shared by the others. A day's baseline read twice could differ (quantiles of a sample), and
// reading it once per panel would cost a dozen reads.
type baselines struct {
	mu sync.Mutex
	m  map[baselineKey]*baselineEntry
}

type baselineKey struct {
	from, to time.Time
	model    string
}

// baselineEntry is one view's baseline; done closes once it is read.
type baselineEntry struct {
	done chan struct{}
	at   time.Time
	// read is the period as diagnose read it (its whole hours when from diagnose_hourly), source
	// how (diagnose.BaselineLive or BaselineHourly), figures its quantities by key.
	read    diagnose.Range
	source  string
	has     bool
	figures map[string]*float64
	err     error
}

const (
	// baselineTTL is how long an entry serves: a view's baseline ends at least an hour back, so
	// only late rows move it.
	baselineTTL = time.Minute
	// baselineEntries bounds the cache.
	baselineEntries = 64
)

func keyOf(v View) baselineKey {
	p := baseline.Default.Of(v.From, v.To)
	return baselineKey{from: p.From, to: p.To, model: v.Filters["model"]}
}

// put keeps a report's baseline for its view.
func (b *baselines) put(v View, rep *diagnose.Report) {
	e := &baselineEntry{done: make(chan struct{}), at: time.Now(), read: rep.Baseline, source: rep.BaselineSource,
		has: rep.HasBaseline, figures: rep.Figures()}
	close(e.done)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.store(keyOf(v), e)
}

// store puts e under k, dropping expired entries and, past the bound, the oldest. b.mu is held.
func (b *baselines) store(k baselineKey, e *baselineEntry) {
	if b.m == nil {
		b.m = map[baselineKey]*baselineEntry{}
	}
	var oldest baselineKey
	var oldestAt time.Time
	for key, old := range b.m {
		if time.Since(old.at) > baselineTTL {
			delete(b.m, key)
			continue
		}
		if oldestAt.IsZero() || old.at.Before(oldestAt) {
			oldest, oldestAt = key, old.at
		}
	}
	if len(b.m) >= baselineEntries {
		delete(b.m, oldest)
	}
	b.m[k] = e
}

// get returns the view's baseline, reading it when no fresh one is kept (one read at a time per
// view: concurrent callers wait for it).
func (b *baselines) get(ctx context.Context, conn driver.Conn, v View) *baselineEntry {
	k := keyOf(v)
	b.mu.Lock()
	e, ok := b.m[k]
	if ok && time.Since(e.at) > baselineTTL {
		select {
		case <-e.done:
			ok = false
		default: // a read under way is fresh
		}
	}
	if !ok {
		e = &baselineEntry{done: make(chan struct{}), at: time.Now()}
		b.store(k, e)
		b.mu.Unlock()
		rng := diagnose.Range{From: k.from, To: k.to}
		s, read, source, err := diagnose.ReadBaseline(ctx, conn, rng, k.model)
		e.read, e.source, e.err = read, source, err
		e.has = err == nil && !s.Empty()
		e.figures = diagnose.BaselineFigures(&s, e.has)
		if err != nil {
			// Not kept: the next panel tries again.
			b.mu.Lock()
			if b.m[k] == e {
				delete(b.m, k)
			}
			b.mu.Unlock()
		}
		close(e.done)
		return e
	}
	b.mu.Unlock()
	select {
	case <-e.done:
	case <-ctx.Done():
		return &baselineEntry{err: ctx.Err()}
	}
	return e
}
