// Package lease lets one instance at a time do a job that several instances stand ready to do
// (the detector's notifications, the scrapes of one engine), with a lease: one key of a NATS
// JetStream key-value bucket whose TTL (the bucket's max_age) the setup step sets
// (`servescope streams up`, bucket SERVESCOPE_LEASES).
//
// An instance takes the lease by creating the key (a create fails while the key exists), renews
// it every TTL/3 by updating the key at the revision it last wrote (an update fails once anyone
// else wrote it), and gives it up on a graceful stop by deleting it at that revision. A holder
// that dies stops renewing; the server removes the key one TTL after the last renewal, and a
// standby, trying every TTL/4, takes over within about 1¼ TTL. Per-key TTLs (nats-server 2.11)
// are not used: nats.go's Update writes no TTL, so a renewal would make the key permanent.
//
// # Guarantees
//
// One holder per key: a holder's term ends (Held turns false and its lead context is cancelled)
// one TTL after the start of its last successful write, measured on its own monotonic clock;
// the server stored that write after it was sent and keeps the key, refusing every other create,
// for one TTL after storing it. So two holders' terms never overlap, provided the two clocks run
// at the same rate (their readings need not agree: only durations are compared).
//
// The documented duplicate: work a holder started inside its term can finish after the term
// ended: a cancelled context does not recall a request already on the wire, and a process paused
// past its term (SIGSTOP, a VM freeze, a swap storm) runs on for the moment its timer needs to
// fire. Check Held immediately before an action that must not happen twice; what remains is the
// action in flight when the term ends — for the detector, at most one message per receiver.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLost is wrapped by Run's error when the lease ended before its holder gave it up: a
// renewal found another holder's write, or none succeeded within the TTL (NATS unreachable).
var ErrLost = errors.New("lease lost")

// Lease is one key of a lease bucket as seen by one candidate holder.
type Lease struct {
	kv     jetstream.KeyValue
	key    string
	holder string
	ttl    time.Duration
	log    *slog.Logger
	// OnChange, when set, is called with true when this instance takes the lease and false
	// when its term ends (lost or given up). It must not block.
	OnChange func(held bool)

	mu         sync.Mutex
	rev        uint64
	validUntil time.Time // the end of the current term (monotonic reading); zero: not held
}

// New prepares a candidate for key in the lease bucket kv. holder names this instance in the
// key's value and in logs (a host name and process id, say). The TTL is the bucket's: a bucket
// without one is refused, since a holder that died would keep the lease for ever.
func New(ctx context.Context, kv jetstream.KeyValue, key, holder string, log *slog.Logger) (*Lease, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("read lease bucket %s: %w", kv.Bucket(), err)
	}
	if st.TTL() <= 0 {
		return nil, fmt.Errorf("lease bucket %s has no TTL: a holder that died would keep its lease for ever; run `servescope streams up`", kv.Bucket())
	}
	if holder == "" {
		return nil, errors.New("lease holder name is empty")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Lease{kv: kv, key: key, holder: holder, ttl: st.TTL(),
		log: log.With("lease", kv.Bucket()+"/"+key, "holder", holder)}, nil
}

// TTL is the bucket's TTL: how long a term lasts past the start of its last renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Key is the lease's key in its bucket.
func (l *Lease) Key() string { return l.key }

// Held reports whether this instance holds the lease now: its term has not ended.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.validUntil.IsZero() && time.Now().Before(l.validUntil)
}

// retryEvery is how often a candidate tries to take the lease.
func (l *Lease) retryEvery() time.Duration { return l.ttl / 4 }

// renewEvery is how often a holder renews: three tries fit in one term.
func (l *Lease) renewEvery() time.Duration { return l.ttl / 3 }

// Run waits until this instance takes the lease, then runs lead with a context that ends with
// the term, renewing the lease while lead runs. It returns:
//   - nil when ctx ends (the lease, if held, is given up so a standby takes over at once);
//   - lead's error, or nil, when lead returns on its own (the lease is given up too);
//   - an error wrapping [ErrLost] when the term ended first, once lead has returned.
//
// A caller that wants to stand by again after a loss calls Run again.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	if !l.acquire(ctx) {
		return nil
	}
	leadCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- lead(leadCtx) }()

	renew := time.NewTicker(l.renewEvery())
	defer renew.Stop()
	for {
		l.mu.Lock()
		left := time.Until(l.validUntil)
		l.mu.Unlock()
		expiry := time.NewTimer(left)
		select {
		case err := <-done:
			expiry.Stop()
			l.release()
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-expiry.C:
			return l.lose(cancel, done, fmt.Errorf("%w: no renewal succeeded within the TTL (%s)", ErrLost, l.ttl))
		case <-renew.C:
			expiry.Stop()
			if err := l.renew(ctx); err != nil {
				if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
					return l.lose(cancel, done, fmt.Errorf("%w: another holder wrote the key: %v", ErrLost, err))
				}
				if ctx.Err() == nil {
					l.log.Warn("lease renewal failed; retrying while the term lasts", "err", err)
				}
			}
		}
	}
}

// acquire tries to create the key every retryEvery until it succeeds (true) or ctx ends (false).
func (l *Lease) acquire(ctx context.Context) bool {
	waiting := false
	for {
		start := time.Now()
		rev, err := l.kv.Create(ctx, l.key, []byte(l.holder))
		if err == nil {
			l.setTerm(start, rev)
			l.log.Info("lease taken", "ttl", l.ttl)
			if l.OnChange != nil {
				l.OnChange(true)
			}
			return true
		}
		switch {
		case ctx.Err() != nil:
			return false
		case errors.Is(err, jetstream.ErrKeyExists):
			if !waiting {
				l.log.Info("lease held by another instance; standing by", "holder_now", l.currentHolder(ctx))
				waiting = true
			}
		default:
			l.log.Warn("take lease failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(l.retryEvery()):
		}
	}
}

// currentHolder names the key's holder, for the log ("" when it cannot be read).
func (l *Lease) currentHolder(ctx context.Context) string {
	e, err := l.kv.Get(ctx, l.key)
	if err != nil {
		return ""
	}
	return string(e.Value())
}

// renew writes the key at the revision last written, bounded by the end of the term.
func (l *Lease) renew(ctx context.Context) error {
	l.mu.Lock()
	rev, until := l.rev, l.validUntil
	l.mu.Unlock()
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	start := time.Now()
	next, err := l.kv.Update(rctx, l.key, []byte(l.holder), rev)
	if err != nil {
		return err
	}
	l.setTerm(start, next)
	return nil
}

func (l *Lease) setTerm(start time.Time, rev uint64) {
	l.mu.Lock()
	l.rev, l.validUntil = rev, start.Add(l.ttl)
	l.mu.Unlock()
}

// lose ends the term: lead's context is cancelled with cause, and lose waits for lead to return.
func (l *Lease) lose(cancel context.CancelCauseFunc, done <-chan error, cause error) error {
	l.endTerm()
	cancel(cause)
	l.log.Error("lease lost; stopping the work it guards", "err", cause)
	<-done
	return cause
}

func (l *Lease) endTerm() {
	l.mu.Lock()
	l.validUntil = time.Time{}
	l.mu.Unlock()
	if l.OnChange != nil {
		l.OnChange(false)
	}
}

// release gives the lease up by deleting the key at the revision this holder wrote last, so a
// standby takes it at its next try instead of one TTL later. A failure leaves the key to expire.
func (l *Lease) release() {
	l.mu.Lock()
	rev, held := l.rev, !l.validUntil.IsZero() && time.Now().Before(l.validUntil)
	l.mu.Unlock()
	l.endTerm()
	if !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev)); err != nil {
		l.log.Warn("give up lease failed; it expires after the TTL", "err", err)
		return
	}
	l.log.Info("lease given up")
}

// DefaultHolder names this process as a lease holder when no name is configured: its host name
// and process id.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
