package service_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/internal/service"
)

// journal records what the parts did, in order.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	j.lines = append(j.lines, s)
	j.mu.Unlock()
}

func (j *journal) get() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.lines)
}

// When the context ends, the parts stop in the order they were added, each only once the one
// before it has stopped, and Run returns nil.
func TestGroupStopsInOrderWhenTheContextEnds(t *testing.T) {
	var j journal
	g := service.NewGroup(nil)
	sawStop := make(chan struct{})
	release := make(chan struct{})
	g.AddContext("intake", func(ctx context.Context) error {
		<-ctx.Done()
		close(sawStop)
		<-release // a drain that takes as long as it takes
		j.add("intake drained")
		return nil
	})
	g.AddStop("publisher", func() { j.add("publisher flushed") })
	g.AddStop("nats", func() { j.add("nats closed") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	cancel()
	<-sawStop
	if got := j.get(); len(got) != 0 {
		t.Fatalf("stopped %v while the first part still drains", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after the context ended", err)
	}
	if got, want := j.get(), []string{"intake drained", "publisher flushed", "nats closed"}; !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
}

// The first part to fail stops the others, in order, and its error (named after it) is Run's.
func TestGroupFirstFailureStopsTheOthers(t *testing.T) {
	var j journal
	g := service.NewGroup(nil)
	boom := errors.New("listen tcp :1: permission denied")
	g.AddContext("scrape", func(ctx context.Context) error {
		<-ctx.Done()
		j.add("scrape stopped")
		return nil
	})
	g.AddContext("http", func(context.Context) error { return boom })
	g.AddStop("nats", func() { j.add("nats closed") })
	err := g.Run(context.Background())
	if !errors.Is(err, boom) || err.Error() != "http: "+boom.Error() {
		t.Fatalf("Run = %v, want %q", err, "http: "+boom.Error())
	}
	if got, want := j.get(), []string{"scrape stopped", "nats closed"}; !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
}

// A part that ends without error ends the run (a log read to its end) with nil; a task that
// ends does not.
func TestGroupPartEndsTaskDoesNot(t *testing.T) {
	var j journal
	g := service.NewGroup(nil)
	taskDone := make(chan struct{})
	g.AddTask("provision", func(context.Context) error {
		j.add("provisioned")
		close(taskDone)
		return nil
	})
	g.AddContext("ship", func(ctx context.Context) error {
		<-taskDone // ends only after the task ended: the group must still be running then
		select {
		case <-ctx.Done():
			return errors.New("stopped by the task's end")
		default:
		}
		j.add("shipped")
		return nil
	})
	g.AddStop("publisher", func() { j.add("publisher flushed") })
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if got, want := j.get(), []string{"provisioned", "shipped", "publisher flushed"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v, want %v", got, want)
	}
}

// A task's error stops the group.
func TestGroupTaskErrorStops(t *testing.T) {
	g := service.NewGroup(nil)
	g.AddTask("provision", func(context.Context) error { return errors.New("stream config differs") })
	g.AddContext("serve", func(ctx context.Context) error { <-ctx.Done(); return nil })
	if err := g.Run(context.Background()); err == nil || err.Error() != "provision: stream config differs" {
		t.Fatalf("Run = %v", err)
	}
}

// A server part lets the request in flight finish before the next part stops.
func TestGroupServerDrainsBeforeTheNextPart(t *testing.T) {
	var j journal
	inFlight := make(chan struct{})
	finish := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(inFlight)
		<-finish
		j.add("request answered")
		_, _ = io.WriteString(w, "whole answer")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := service.NewGroup(nil)
	g.AddServer("http", srv, ln, time.Minute)
	g.AddStop("publisher", func() { j.add("publisher flushed") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			answer <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(b)
	}()
	<-inFlight
	cancel()
	// The listener closes at once; the request in flight is not cut.
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	if got := j.get(); len(got) != 0 {
		t.Fatalf("%v before the request in flight finished", got)
	}
	close(finish)
	if a := <-answer; a != "whole answer" {
		t.Fatalf("client got %q", a)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, want := j.get(), []string{"request answered", "publisher flushed"}; !slices.Equal(got, want) {
		t.Fatalf("journal %v, want %v", got, want)
	}
}

// A server that cannot serve fails the group with the address in the error.
func TestGroupServerFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	g := service.NewGroup(nil)
	g.AddServer("metrics", &http.Server{}, ln, time.Second)
	if err := g.Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "metrics: serve on 127.0.0.1:") {
		t.Fatalf("Run = %v", err)
	}
}
