package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/ksuid"

	"github.com/servescope/servescope/sim/loadgen/load"
)

// Outcome is what a client saw of one request.
type Outcome struct {
	ID     string
	Source string // "loadgen" or "ragdemo"
	At     time.Time
	OK     bool
	Err    string // why it failed, as the client saw it
	// Gateway is true when the request went through the gateway (every loadgen request and
	// the ragdemo asks that were not answered from ragdemo's cache).
	Gateway bool
}

// Book keeps every client outcome of the run, by request id.
type Book struct {
	mu       sync.Mutex
	outcomes map[string]*Outcome
	order    []string
}

// NewBook returns an empty book.
func NewBook() *Book { return &Book{outcomes: map[string]*Outcome{}} }

func (b *Book) put(o *Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.outcomes[o.ID]; !ok {
		b.order = append(b.order, o.ID)
	}
	b.outcomes[o.ID] = o
}

// All returns a copy of every outcome in send order.
func (b *Book) All() []Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Outcome, 0, len(b.order))
	for _, id := range b.order {
		out = append(out, *b.outcomes[id])
	}
	return out
}

// recorder is loadgen's HTTP transport: it notes each completion request's X-Request-Id and
// whether the client saw it succeed (200 and a stream that ends with [DONE] without an error
// event), and drains what is left of a body on Close like the OpenAI SDKs do (see
// demo.LoadClient for why).
type recorder struct {
	base http.RoundTripper
	book *Book
}

func (t recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/completions") {
		return t.base.RoundTrip(req)
	}
	o := &Outcome{ID: req.Header.Get("X-Request-Id"), Source: "loadgen", At: time.Now(), Gateway: true}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		o.Err = "connection: " + err.Error()
		t.book.put(o)
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		o.Err = resp.Status
		t.book.put(o)
		return resp, nil
	}
	resp.Body = &watchBody{ReadCloser: resp.Body, o: o, book: t.book}
	return resp, nil
}

type watchBody struct {
	io.ReadCloser
	o      *Outcome
	book   *Book
	tailB  []byte
	errEv  bool
	done   bool
	closed bool
	rerr   error
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.observe(p[:n])
	if err != nil && err != io.EOF {
		b.rerr = err
	}
	return n, err
}

func (b *watchBody) observe(chunk []byte) {
	buf := append(b.tailB, chunk...)
	if bytes.Contains(buf, []byte("data: [DONE]")) {
		b.done = true
	}
	if bytes.Contains(buf, []byte(`data: {"error"`)) {
		b.errEv = true
	}
	if len(buf) > 32 {
		buf = buf[len(buf)-32:]
	}
	b.tailB = append([]byte(nil), buf...)
}

func (b *watchBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	rest, _ := io.ReadAll(io.LimitReader(b.ReadCloser, 64<<10))
	b.observe(rest)
	err := b.ReadCloser.Close()
	switch {
	case b.errEv:
		b.o.Err = "error event in the stream"
	case b.rerr != nil:
		b.o.Err = "stream broke: " + b.rerr.Error()
	case !b.done:
		b.o.Err = "stream ended without [DONE]"
	default:
		b.o.OK = true
	}
	b.book.put(b.o)
	return err
}

// Traffic is the run's steady client load: loadgen through the gateway in chunks of a few
// seconds and ragdemo asks, both pausable, so a fault that deliberately takes the gateway away
// sends no user request into it.
type Traffic struct {
	Book      *Book
	Gateway   string // gateway base URL
	RAG       string // ragdemo base URL
	Model     string
	Rate      float64       // loadgen requests per second
	AskEvery  time.Duration // one ragdemo ask per AskEvery
	Chunk     time.Duration // loadgen run length between pause points
	MaxTokens int

	paused   atomic.Bool
	inFlight atomic.Int64 // running chunks and asks
	mu       sync.Mutex
	reports  []*load.Report
	runErrs  []string
	asks     atomic.Int64
}

// Pause stops new requests and waits until every request in flight has ended, or ctx ends.
func (t *Traffic) Pause(ctx context.Context) error {
	t.paused.Store(true)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for t.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Resume lets requests flow again.
func (t *Traffic) Resume() { t.paused.Store(false) }

// Run sends traffic until ctx ends and returns once every request it sent has ended.
func (t *Traffic) Run(ctx context.Context) {
	client := &http.Client{Transport: recorder{base: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}, book: t.Book}}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		t.loadLoop(ctx, client)
	}()
	go func() {
		defer wg.Done()
		t.askLoop(ctx)
	}()
	wg.Wait()
	// Asks run on their own goroutines; the book is complete once the last one has ended. This
	// outlives ctx on purpose: each ask ends within its client's timeout, and an abandoned one
	// would be missing from the ledger.
	for t.inFlight.Load() > 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

func (t *Traffic) gate(ctx context.Context) bool {
	for t.paused.Load() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return ctx.Err() == nil
}

func (t *Traffic) loadLoop(ctx context.Context, client *http.Client) {
	for seed := uint64(1); ; seed++ {
		if !t.gate(ctx) {
			return
		}
		t.inFlight.Add(1)
		if t.paused.Load() {
			t.inFlight.Add(-1)
			continue
		}
		stream := true
		rep, err := load.Run(context.WithoutCancel(ctx), load.Config{
			Target: t.Gateway, MetricsURL: "none", Scenario: "custom", Model: t.Model, Rate: t.Rate,
			Duration: t.Chunk, PromptTokens: 44, MaxTokens: t.MaxTokens, Stream: &stream, Seed: seed,
			Concurrency: 64, RequestTimeout: time.Minute, HTTPClient: client,
		})
		t.mu.Lock()
		if err != nil {
			t.runErrs = append(t.runErrs, err.Error())
		} else {
			t.reports = append(t.reports, rep)
		}
		t.mu.Unlock()
		t.inFlight.Add(-1)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// askLoop posts one ragdemo question per AskEvery. Each question is new (ragdemo's cache would
// answer a repeated one without a model request) and carries its own X-Request-Id.
func (t *Traffic) askLoop(ctx context.Context) {
	client := &http.Client{Timeout: time.Minute}
	tick := time.NewTicker(t.AskEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !t.gate(ctx) {
			return
		}
		t.inFlight.Add(1)
		if t.paused.Load() {
			t.inFlight.Add(-1)
			continue
		}
		n := t.asks.Add(1)
		go func() {
			defer t.inFlight.Add(-1)
			t.ask(client, n)
		}()
	}
}

var askTopics = []string{
	"Why does queue wait stay at zero under normal load?",
	"What does the KV cache usage gauge measure?",
	"How is time to first token split between queue and prefill?",
	"When does the engine preempt sequences?",
	"What limits the number of running requests?",
}

func (t *Traffic) ask(client *http.Client, n int64) {
	id := ksuid.New().String()
	o := &Outcome{ID: id, Source: "ragdemo", At: time.Now()}
	q := fmt.Sprintf("%s (chaos question %d)", askTopics[int(n)%len(askTopics)], n)
	body, _ := json.Marshal(map[string]string{"question": q})
	req, _ := http.NewRequest(http.MethodPost, t.RAG+"/ask", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		o.Err = "connection: " + err.Error()
		t.Book.put(o)
		return
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var ans struct {
		CacheHit bool   `json:"cache_hit"`
		Error    string `json:"error"`
	}
	_ = json.Unmarshal(raw, &ans)
	o.Gateway = !ans.CacheHit
	if resp.StatusCode != http.StatusOK {
		o.Err = fmt.Sprintf("%s: %s", resp.Status, ans.Error)
	} else {
		o.OK = true
	}
	t.Book.put(o)
}

// Reports returns loadgen's reports and the errors of chunks that could not start.
func (t *Traffic) Reports() ([]*load.Report, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*load.Report(nil), t.reports...), append([]string(nil), t.runErrs...)
}
