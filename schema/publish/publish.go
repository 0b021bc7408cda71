// Package publish sends servescope events to NATS JetStream without ever blocking or failing the
// caller because NATS is slow or away.
//
// A [Publisher] validates and encodes each event on the caller's goroutine (an invalid event is a
// programming error and is returned), then hands it to a bounded in-memory queue. One goroutine
// drains the queue to JetStream with asynchronous publishes, each carrying Nats-Msg-Id = the
// event's event_id. An event counts as delivered only when JetStream acknowledged it (a PubAck);
// every event that is not acknowledged — NATS unreachable, no stream yet, a timeout, a disconnect
// while the acknowledgement was outstanding, or a full queue — is appended to an on-disk spool.
// While the spool holds events, new events are appended behind them, and a replay goroutine
// publishes the spool in order once NATS answers again, so the stream receives events in the
// order they were spooled. A replayed event keeps its event_id: when an event was in fact
// delivered before it was spooled (its acknowledgement was lost), JetStream's duplicate window
// and the ClickHouse tables' keys absorb the second copy.
//
// The publisher never creates or changes a stream: the setup step (`servescope migrate up`) owns
// the streams. Given the kinds it sends (Config.Kinds), it checks at start that the events stream
// exists and takes them, logs what is missing and the command that creates it, and logs the
// stream's limits that differ from the service's own (Config.Expect).
//
// The spool is a directory of append-only segment files of length-prefixed, CRC-32C-checked
// records, with a cursor file naming the next record to replay. It survives a crash: a record cut
// short at the end of a segment is skipped with a warning, never replayed garbled. Its size is
// capped (Config.SpoolMaxBytes); only when the cap is reached are events dropped, each drop
// counted in Stats.Dropped and logged as an error.
//
// Use one Publisher per process and per spool directory. The nats.Conn should reconnect forever
// (nats.MaxReconnects(-1)); nats.ReconnectBufSize(-1) makes publishes during a reconnect fail at
// once (and go to the spool) instead of waiting in the connection's buffer for an acknowledgement
// timeout. Typical use:
//
//	nc, _ := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectBufSize(-1))
//	p, err := publish.New(nc, schema.DefaultPrefix, publish.Config{SpoolDir: "/var/lib/myapp/spool"})
//	...
//	rec := schema.NewAppRecord(requestID, "ragdemo", time.Now())
//	if err := p.Publish(rec); err != nil { /* the record is invalid: fix the code */ }
//	...
//	defer p.Close(ctx) // flushes the queue to JetStream, or to the spool
package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/schema"
)

// Config tunes a Publisher. Zero values take the defaults named on each field.
type Config struct {
	// SpoolDir is the directory of the on-disk spool (required). One Publisher per directory.
	SpoolDir string
	// SpoolMaxBytes caps the spool's size on disk (default 1 GiB). Events that would exceed it
	// are dropped and counted in Stats.Dropped.
	SpoolMaxBytes int64
	// SegmentBytes is the size at which the spool starts a new segment file (default 16 MiB);
	// replayed segments are deleted whole.
	SegmentBytes int64
	// Fsync is the spool's sync policy (default FsyncInterval).
	Fsync FsyncPolicy
	// FsyncInterval is the sync period of FsyncInterval (default 1 s).
	FsyncInterval time.Duration
	// QueueSize bounds the in-memory queue, in events (default 8192). A full queue spills to the
	// spool instead of blocking.
	QueueSize int
	// MaxPending bounds the publishes awaiting a JetStream acknowledgement (default 4096).
	MaxPending int
	// AckTimeout is how long a publish waits for its acknowledgement before the event goes to the
	// spool (default 5 s).
	AckTimeout time.Duration
	// Linger is how long the sender holds an event for more to send along with it, in one burst
	// of publishes and one burst of acknowledgements (default 0: send at once). A few
	// milliseconds cut the broker's CPU per event several-fold at moderate rates (nats-server
	// 2.15, file store: about 50 µs per event sent alone, about 10 µs in bursts of 16 or more),
	// which matters when the broker shares cores with a latency-sensitive process. Events reach
	// JetStream up to Linger later.
	Linger time.Duration
	// RetryInterval is how often the replay loop retries while NATS is away (default 1 s).
	RetryInterval time.Duration
	// Logger receives the publisher's logs (default slog.Default()).
	Logger *slog.Logger
	// Kinds lists the kinds this publisher sends. When set, the publisher checks in the
	// background, once NATS answers, that the events stream of its prefix exists and takes each
	// kind's subject. It never creates or changes a stream: the setup step (`servescope migrate
	// up`) owns the streams. Until the check passes, events that JetStream refuses are spooled
	// as always, and the check is retried every RetryInterval, doubling up to 30 s; what is
	// missing is logged as a warning during SetupWait and as an error after it, and
	// [Publisher.StreamCheck] returns it.
	Kinds []schema.Kind
	// Expect holds this service's own settings for the events stream: once the check passes,
	// each non-zero MaxAge, MaxBytes, Replicas and Duplicates that differs from the stream's is
	// logged, all in one warning; the stream is used as it is. Other fields are ignored.
	Expect jetstream.StreamConfig
	// SetupWait is how long a failing stream check is logged as a warning before it is logged
	// as an error (default 2 min): long enough for the setup step that starts alongside.
	SetupWait time.Duration
	// Registerer, when set, gets the publisher's counters as Prometheus metrics
	// (servescope_publish_events_{published,spooled,replayed,dropped}_total,
	// servescope_publish_spool_events, servescope_publish_spool_bytes, servescope_publish_queue_events).
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = 1 << 30
	}
	if c.SegmentBytes <= 0 {
		c.SegmentBytes = 16 << 20
	}
	if c.Fsync == "" {
		c.Fsync = FsyncInterval
	}
	if c.FsyncInterval <= 0 {
		c.FsyncInterval = time.Second
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 8192
	}
	if c.MaxPending <= 0 {
		c.MaxPending = 4096
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SetupWait <= 0 {
		c.SetupWait = 2 * time.Minute
	}
}

// Stats are the publisher's counters since New.
type Stats struct {
	// Published counts events acknowledged by JetStream on their first send.
	Published uint64
	// Spooled counts events written to the spool.
	Spooled uint64
	// Replayed counts spooled events later acknowledged by JetStream.
	Replayed uint64
	// Dropped counts events lost because the spool was full or could not be written. It stays 0
	// unless the spool's cap is reached.
	Dropped uint64
	// SpoolEvents is the number of events in the spool waiting for replay.
	SpoolEvents int64
	// SpoolBytes is the spool's size on disk.
	SpoolBytes int64
	// QueueEvents is the number of events in the in-memory queue.
	QueueEvents int
}

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("publish: publisher is closed")

// Publisher delivers events to JetStream through a bounded queue and an on-disk spool. Its
// methods are safe for concurrent use.
type Publisher struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string
	cfg    Config
	log    *slog.Logger
	spool  *spool

	queue   chan *record
	pending chan []pendingAck // batches of direct publishes awaiting their acknowledgement, in send order
	kick    chan struct{}     // wakes the replay loop

	// mu orders the choice "publish directly or append to the spool" against the replay loop's
	// "spool is empty, go direct again", so no event overtakes the spool.
	mu       sync.Mutex
	spooling bool

	// closeMu makes Close wait for Publish calls in progress, so none enqueues after the queue's
	// final drain.
	closeMu    sync.RWMutex
	closed     bool
	closeOnce  sync.Once
	stop       chan struct{} // closed by Close: background loops finish
	abandon    chan struct{} // closed by Close at its deadline: stop waiting for acknowledgements
	drained    chan struct{} // closed when the drain loop has emptied the queue after stop
	replayDone chan struct{} // closed when the replay loop has stopped
	acked      chan struct{} // closed when the ack loop has resolved every pending publish
	bgDone     sync.WaitGroup

	// stopCtx ends with stop (cancelStop), for the stream check's requests.
	stopCtx    context.Context
	cancelStop context.CancelFunc

	// checkErr is the stream check's outcome: errNotChecked until it ran, nil once it passed.
	checkErr atomic.Pointer[error]

	published, spooled, replayed, dropped atomic.Uint64
	dropLogged                            atomic.Int64 // unix seconds of the last drop log line
}

type pendingAck struct {
	fut jetstream.PubAckFuture
	rec *record
}

// New returns a Publisher publishing on schema.SubjectWithPrefix(prefix, kind) through nc. It
// opens (and recovers) the spool, and starts replaying it when it holds events from an earlier
// run. It fails when the spool directory cannot be used or the metrics cannot be registered; it
// does not need NATS to be reachable.
func New(nc *nats.Conn, prefix string, cfg Config) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("publish: nil NATS connection")
	}
	if prefix == "" {
		return nil, errors.New("publish: empty subject prefix")
	}
	if cfg.SpoolDir == "" {
		return nil, errors.New("publish: Config.SpoolDir is required")
	}
	switch cfg.Fsync {
	case "", FsyncAlways, FsyncInterval, FsyncNever:
	default:
		return nil, fmt.Errorf("publish: unknown fsync policy %q (want always, interval or never)", cfg.Fsync)
	}
	cfg.setDefaults()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("publish: JetStream context: %w", err)
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.Fsync, cfg.SpoolMaxBytes, cfg.SegmentBytes, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	p := &Publisher{
		nc: nc, js: js, prefix: prefix, cfg: cfg, log: cfg.Logger, spool: sp,
		queue:      make(chan *record, cfg.QueueSize),
		pending:    make(chan []pendingAck, cfg.MaxPending),
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		abandon:    make(chan struct{}),
		replayDone: make(chan struct{}),
		drained:    make(chan struct{}),
		acked:      make(chan struct{}),
	}
	p.stopCtx, p.cancelStop = context.WithCancel(context.Background())
	if pending, _ := sp.stats(); pending > 0 {
		p.spooling = true
		p.log.Info("spool holds events from an earlier run; replaying when NATS answers", "events", pending, "dir", cfg.SpoolDir)
	}
	if cfg.Registerer != nil {
		if err := p.register(cfg.Registerer); err != nil {
			_ = sp.close()
			return nil, err
		}
	}
	p.bgDone.Add(3)
	go p.drainLoop()
	go p.ackLoop()
	go p.replayLoop()
	if cfg.Fsync == FsyncInterval {
		p.bgDone.Add(1)
		go p.syncLoop()
	}
	if len(cfg.Kinds) > 0 {
		p.checkErr.Store(&errNotChecked)
		p.bgDone.Add(1)
		go p.checkLoop()
	} else {
		p.checkErr.Store(new(error))
	}
	return p, nil
}

// Publish validates and encodes e and queues it for delivery. It returns the validation error
// (a [schema.ValidationErrors]) for an invalid event, and ErrClosed after Close; otherwise it
// returns nil at once and the event is delivered, or spooled for later delivery.
func (p *Publisher) Publish(e schema.Event) error {
	data, err := schema.Encode(e)
	if err != nil {
		return err
	}
	rec := &record{subject: schema.SubjectWithPrefix(p.prefix, e.Kind()), msgID: schema.MsgID(e), data: data}
	p.closeMu.RLock()
	defer p.closeMu.RUnlock()
	if p.closed {
		return ErrClosed
	}
	select {
	case p.queue <- rec:
	default:
		// The queue is full: NATS is slower than the producers. Spill rather than block.
		p.toSpool(rec, errQueueFull)
	}
	return nil
}

// Stats returns the current counters.
func (p *Publisher) Stats() Stats {
	pending, bytes := p.spool.stats()
	return Stats{
		Published: p.published.Load(), Spooled: p.spooled.Load(),
		Replayed: p.replayed.Load(), Dropped: p.dropped.Load(),
		SpoolEvents: pending, SpoolBytes: bytes, QueueEvents: len(p.queue),
	}
}

// Close stops accepting events, sends what is queued to JetStream and waits for the
// acknowledgements until ctx ends, and replays the spool while NATS takes it; whatever is not
// acknowledged by then is written to the spool (for replay by the next Publisher on the same
// directory). The NATS connection stays open: it
// belongs to the caller.
func (p *Publisher) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		p.closeMu.Lock()
		p.closed = true
		p.closeMu.Unlock()
		close(p.stop)
		p.cancelStop()
		select {
		case <-p.drained:
		case <-ctx.Done():
		}
		select {
		case <-p.acked:
		case <-ctx.Done():
		}
		// A spool NATS could take now is sent before leaving, so a clean shutdown leaves none.
		select {
		case <-p.replayDone:
			for ctx.Err() == nil && p.nc.IsConnected() && !p.spool.isEmpty() {
				if !p.replayOnce() && !p.spool.isEmpty() {
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
		case <-ctx.Done():
		}
		// Done or past the deadline: whatever is not acknowledged yet goes to the spool. The loops
		// may still be running; they hand their leftovers over through the channels or spool them.
		close(p.abandon)
		p.finish()
		p.bgDone.Wait()
		err = p.spool.close()
	})
	return err
}

// finish moves every event still queued or awaiting acknowledgement to the spool.
func (p *Publisher) finish() {
	pending := p.pending
	for {
		select {
		case rec := <-p.queue:
			p.toSpool(rec, errShutdown)
		case batch, ok := <-pending:
			if !ok {
				pending = nil
				continue
			}
			for _, pa := range batch {
				p.resolve(pa, true)
			}
		default:
			return
		}
	}
}

// maxBatch bounds the events one drain round sends before handing their acknowledgements over.
const maxBatch = 1024

// drainLoop sends queued events to JetStream, or to the spool while it is in use.
//
// With Linger, the first event of a round waits that long for company, and then everything
// queued goes out together: an event sent alone costs the broker several times the CPU of one
// in a burst (measured on nats-server 2.15 with a file store: about 50 µs per event alone, about
// 10 µs per event in bursts of 16 or more, no further gain from bursts of 256 or from writing a
// burst in one syscall), and the broker shares the machine with the process being observed.
func (p *Publisher) drainLoop() {
	defer p.bgDone.Done()
	defer close(p.drained)
	defer close(p.pending)
	var linger *time.Timer
	if p.cfg.Linger > 0 {
		linger = time.NewTimer(p.cfg.Linger)
		linger.Stop()
	}
	batch := make([]*record, 0, 64)
	for {
		select {
		case rec := <-p.queue:
			batch = append(batch[:0], rec)
			if linger != nil {
				linger.Reset(p.cfg.Linger)
				select {
				case <-linger.C:
				case <-p.stop:
					linger.Stop()
				}
			}
			for n := len(p.queue); n > 0 && len(batch) < maxBatch; n-- {
				batch = append(batch, <-p.queue)
			}
			p.sendBatch(batch)
			clear(batch)
		case <-p.stop:
			for {
				batch = batch[:0]
				for n := len(p.queue); n > 0 && len(batch) < maxBatch; n-- {
					batch = append(batch, <-p.queue)
				}
				if len(batch) == 0 {
					return
				}
				p.sendBatch(batch)
				clear(batch)
			}
		}
	}
}

// sendBatch publishes recs in order and hands their acknowledgements to the ack loop in one go.
func (p *Publisher) sendBatch(recs []*record) {
	acks := make([]pendingAck, 0, len(recs))
	for _, rec := range recs {
		if pa, ok := p.send(rec); ok {
			acks = append(acks, pa)
		}
	}
	if len(acks) > 0 {
		p.pending <- acks
	}
}

// send publishes rec directly, or spools it when the spool is in use or the publish fails; ok
// when an acknowledgement is awaited.
func (p *Publisher) send(rec *record) (pendingAck, bool) {
	p.mu.Lock()
	if p.spooling || !p.nc.IsConnected() {
		p.appendLocked(rec, errNotConnected)
		p.mu.Unlock()
		return pendingAck{}, false
	}
	p.mu.Unlock()
	msg := &nats.Msg{Subject: rec.subject, Data: rec.data, Header: nats.Header{jetstream.MsgIDHeader: []string{rec.msgID}}}
	fut, err := p.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0))
	if err != nil {
		p.toSpool(rec, err)
		return pendingAck{}, false
	}
	return pendingAck{fut: fut, rec: rec}, true
}

// ackLoop resolves direct publishes in send order, a batch at a time: it waits for the batch's
// last acknowledgement first (one connection to one stream acknowledges in order), so the others
// are found resolved without a wake-up each.
func (p *Publisher) ackLoop() {
	defer p.bgDone.Done()
	defer close(p.acked)
	for batch := range p.pending {
		last := batch[len(batch)-1]
		// A future's channels deliver their outcome once: the last one is resolved here.
		var why error
		select {
		case <-last.fut.Ok():
		case why = <-last.fut.Err():
		case <-p.abandon:
			why = errShutdown
		}
		for _, pa := range batch[:len(batch)-1] {
			p.resolve(pa, false)
		}
		if why == nil {
			p.published.Add(1)
		} else {
			p.toSpool(last.rec, why)
		}
	}
}

// resolve waits for one acknowledgement (unless abandon) and spools the event when it failed.
func (p *Publisher) resolve(pa pendingAck, abandon bool) {
	why := errShutdown
	if !abandon {
		select {
		case <-pa.fut.Ok():
			p.published.Add(1)
			return
		case why = <-pa.fut.Err():
		case <-p.abandon:
		}
	} else {
		select {
		case <-pa.fut.Ok():
			p.published.Add(1)
			return
		default:
		}
	}
	p.toSpool(pa.rec, why)
}

// StreamCheck returns why the events stream cannot take this publisher's kinds yet (an error
// wrapping bus.ErrNotSetUp when the setup step has not made it so, or NATS's error), or nil once
// the check passed or when Config.Kinds is empty.
func (p *Publisher) StreamCheck() error { return *p.checkErr.Load() }

var errNotChecked = errors.New("events stream not checked yet: NATS has not answered")

// checkTimeout bounds one stream check.
const checkTimeout = 10 * time.Second

// checkLoop checks the events stream until it can take every kind of Config.Kinds (see there).
func (p *Publisher) checkLoop() {
	defer p.bgDone.Done()
	topo := bus.Topology{Prefix: p.prefix}
	start := time.Now()
	wait := p.cfg.RetryInterval
	for {
		if p.nc.IsConnected() {
			ctx, cancel := context.WithTimeout(p.stopCtx, checkTimeout)
			diffs, err := bus.CheckStream(ctx, p.js, topo, p.cfg.Kinds, p.cfg.Expect)
			cancel()
			if p.stopCtx.Err() != nil {
				return
			}
			if err == nil {
				p.checkErr.Store(new(error))
				p.log.Info("JetStream stream takes this publisher's events", "stream", topo.Stream(), "kinds", p.cfg.Kinds)
				bus.LogDifferences(p.log, diffs)
				return
			}
			p.checkErr.Store(&err)
			level := slog.LevelWarn
			if errors.Is(err, bus.ErrNotSetUp) && time.Since(start) >= p.cfg.SetupWait {
				level = slog.LevelError
			}
			p.log.Log(p.stopCtx, level, "JetStream stream cannot take this publisher's events yet; they are spooled meanwhile",
				"error", err, "retry_in", wait)
			wait = min(2*wait, 30*time.Second)
		}
		select {
		case <-p.stop:
			return
		case <-time.After(wait):
		}
	}
}

// Reasons for spooling that are not NATS errors.
var (
	errQueueFull    = errors.New("in-memory queue full")
	errShutdown     = errors.New("not acknowledged before shutdown")
	errNotConnected = errors.New("NATS not connected")
)

// toSpool appends rec to the spool and switches publishing to the spool until it is replayed;
// why is logged when publishing switches.
func (p *Publisher) toSpool(rec *record, why error) {
	p.mu.Lock()
	p.appendLocked(rec, why)
	p.mu.Unlock()
}

func (p *Publisher) appendLocked(rec *record, why error) {
	if err := p.spool.append(rec); err != nil {
		p.dropped.Add(1)
		// One line per second at most: a full spool under load would flood the log.
		now := time.Now().Unix()
		if last := p.dropLogged.Load(); now > last && p.dropLogged.CompareAndSwap(last, now) {
			p.log.Error("event dropped: spool cannot take it", "error", err, "subject", rec.subject,
				"event_id", rec.msgID, "dropped_total", p.dropped.Load(), "spool_max_bytes", p.cfg.SpoolMaxBytes)
		}
		return
	}
	p.spooled.Add(1)
	if !p.spooling {
		p.spooling = true
		p.log.Warn("publishing to the spool until NATS answers again", "reason", why, "dir", p.cfg.SpoolDir)
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// replayBatch is how many spooled events one replay round sends before waiting for their
// acknowledgements and advancing the cursor.
const replayBatch = 256

// replayLoop sends the spool to JetStream in order whenever it holds events and NATS is up.
func (p *Publisher) replayLoop() {
	defer p.bgDone.Done()
	defer close(p.replayDone)
	t := time.NewTicker(p.cfg.RetryInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-t.C:
		}
		for p.replayOnce() {
			select {
			case <-p.stop:
				return
			default:
			}
		}
	}
}

// replayOnce replays one batch; it reports whether to go on at once (progress was made and
// events remain).
func (p *Publisher) replayOnce() bool {
	if p.spool.isEmpty() {
		p.mu.Lock()
		if p.spooling && p.spool.isEmpty() {
			p.spooling = false
		}
		p.mu.Unlock()
		return false
	}
	if !p.nc.IsConnected() {
		return false
	}
	recs, next, err := p.spool.read(replayBatch)
	if err != nil {
		p.log.Error("read spool for replay", "error", err)
		return false
	}
	futs := make([]jetstream.PubAckFuture, 0, len(recs))
	for i := range recs {
		r := &recs[i]
		msg := &nats.Msg{Subject: r.subject, Data: r.data, Header: nats.Header{jetstream.MsgIDHeader: []string{r.msgID}}}
		fut, err := p.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0))
		if err != nil {
			break
		}
		futs = append(futs, fut)
	}
	ok := len(futs) == len(recs)
	for _, f := range futs {
		select {
		case <-f.Ok():
		case <-f.Err():
			ok = false
		case <-p.abandon:
			return false
		}
	}
	if !ok {
		// Retry the whole batch on the next tick; the acknowledged part is de-duplicated by
		// Nats-Msg-Id.
		return false
	}
	p.mu.Lock()
	empty, err := p.spool.commit(next, int64(len(recs)))
	if empty {
		p.spooling = false
		p.log.Info("spool replayed; publishing directly again", "replayed_total", p.replayed.Load()+uint64(len(recs)))
	}
	p.mu.Unlock()
	p.replayed.Add(uint64(len(recs)))
	if err != nil {
		p.log.Error("advance spool cursor", "error", err)
		return false
	}
	return !empty
}

func (p *Publisher) syncLoop() {
	defer p.bgDone.Done()
	t := time.NewTicker(p.cfg.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			if err := p.spool.sync(); err != nil {
				p.log.Error("sync spool", "error", err)
			}
		}
	}
}

func (p *Publisher) register(r prometheus.Registerer) error {
	counter := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	cs := []prometheus.Collector{
		counter("servescope_publish_events_published_total", "Events acknowledged by JetStream on their first send.", &p.published),
		counter("servescope_publish_events_spooled_total", "Events written to the on-disk spool.", &p.spooled),
		counter("servescope_publish_events_replayed_total", "Spooled events later acknowledged by JetStream.", &p.replayed),
		counter("servescope_publish_events_dropped_total", "Events lost because the spool was full or unwritable.", &p.dropped),
		gauge("servescope_publish_spool_events", "Events in the spool waiting for replay.", func() float64 { n, _ := p.spool.stats(); return float64(n) }),
		gauge("servescope_publish_spool_bytes", "Size of the spool on disk in bytes.", func() float64 { _, b := p.spool.stats(); return float64(b) }),
		gauge("servescope_publish_queue_events", "Events in the in-memory queue.", func() float64 { return float64(len(p.queue)) }),
	}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("publish: register metrics: %w", err)
		}
	}
	return nil
}
