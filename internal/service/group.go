package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/oklog/run"
)

// Group runs the parts of a service together and stops them in order: a github.com/oklog/run
// group whose parts have names. When the context given to Run ends or the first part returns,
// Run calls every part's interrupt function, one after the other in the order the parts were
// added, and returns once every part has returned. The interrupts added with AddContext,
// AddServer and AddStop return only once their part has stopped, so a part is stopped only
// after every part added before it: the order of the Add calls is the stop order.
//
// The zero value is not usable; call NewGroup. Run is called once.
type Group struct {
	log   *slog.Logger
	g     run.Group
	once  sync.Once
	first string // the part that returned first; "" when the context ended first
}

// NewGroup returns an empty group logging to log.
func NewGroup(log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log}
}

// ended records who ended first; only the first call counts. It reports whether this call was
// the first.
func (g *Group) ended(name string) (first bool) {
	g.once.Do(func() {
		g.first = name
		first = true
	})
	return first
}

// Add adds a part. execute runs it and returns when it ends, by itself or because interrupt was
// called; interrupt must make execute return, must be safe to call after execute returned, and
// should return only once the part has stopped (see Group).
func (g *Group) Add(name string, execute func() error, interrupt func()) {
	g.g.Add(func() error {
		err := execute()
		if g.ended(name) {
			if err != nil {
				g.log.Error("part failed; stopping the others", "part", name, "err", err)
			} else {
				g.log.Info("part ended; stopping the others", "part", name)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}, func(error) {
		g.log.Debug("stopping", "part", name)
		interrupt()
		g.log.Debug("stopped", "part", name)
	})
}

// AddContext adds a part that runs until its context ends. Its interrupt cancels that context
// and returns once run has returned.
func (g *Group) AddContext(name string, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	g.Add(name, func() error {
		defer close(done)
		return run(ctx)
	}, func() {
		cancel()
		<-done
	})
}

// AddTask adds a part that does a piece of work which may end before the service does, such as
// provisioning with retries. Unlike a part added with AddContext, its finishing without error
// does not stop the group; an error does. Its interrupt cancels run's context and returns once
// run has returned.
func (g *Group) AddTask(name string, run func(ctx context.Context) error) {
	g.AddContext(name, func(ctx context.Context) error {
		if err := run(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
}

// AddServer adds srv serving on ln. Its interrupt stops the server gracefully: no new
// connections, up to timeout for the requests in flight (streams included), then the remaining
// connections are closed; it returns once Serve has returned.
func (g *Group) AddServer(name string, srv *http.Server, ln net.Listener, timeout time.Duration) {
	done := make(chan struct{})
	g.Add(name, func() error {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
		}
		return nil
	}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			g.log.Warn("requests still in flight when the shutdown timeout passed; closing their connections", "part", name, "timeout", timeout, "err", err)
			_ = srv.Close()
		}
		<-done
	})
}

// AddStop adds a part that does nothing until the group stops, then runs stop: the place in the
// stop order of a resource that others use, such as flushing a publisher or closing a
// connection.
func (g *Group) AddStop(name string, stop func()) {
	quit := make(chan struct{})
	var once sync.Once
	g.Add(name, func() error {
		<-quit
		return nil
	}, func() {
		once.Do(func() {
			stop()
			close(quit)
		})
	})
}

// Run runs the parts until ctx ends or the first part returns, stops them all in order, and
// returns the first part's error (named after it), or nil when that part ended without error or
// ctx ended (a signal is the normal way to stop a service).
func (g *Group) Run(ctx context.Context) error {
	stop := make(chan struct{})
	g.g.Add(func() error {
		select {
		case <-ctx.Done():
			if g.ended("") {
				g.log.Info("stopping", "reason", context.Cause(ctx).Error())
			}
		case <-stop:
		}
		return nil
	}, func(error) { close(stop) })
	err := g.g.Run()
	g.log.Debug("every part stopped")
	return err
}
