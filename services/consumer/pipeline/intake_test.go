package pipeline

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// msgN is a message that only knows its place in a pull.
type msgN struct {
	jetstream.Msg
	n int
}

// A pull's backlog goes to the decoders in full chunks, in order, the rest when the pull ends.
func TestTakeHandsABacklogOverInChunks(t *testing.T) {
	msgs := make(chan jetstream.Msg, 2*chunkSize+10)
	for i := range 2*chunkSize + 10 {
		msgs <- msgN{n: i}
	}
	close(msgs)
	out := make(chan []jetstream.Msg, 10)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	if got := take(msgs, out, linger); got != 2*chunkSize+10 {
		t.Fatalf("took %d, want %d", got, 2*chunkSize+10)
	}
	close(out)
	var sizes []int
	next := 0
	for c := range out {
		sizes = append(sizes, len(c))
		for _, m := range c {
			if m.(msgN).n != next {
				t.Fatalf("message %d handed over as number %d", m.(msgN).n, next)
			}
			next++
		}
	}
	// The pull's messages were all there at once: no chunk left before it was full, except the
	// last, at the pull's end.
	if len(sizes) != 3 || sizes[0] != chunkSize || sizes[1] != chunkSize || sizes[2] != 10 {
		t.Errorf("chunk sizes %v, want [%d %d 10]", sizes, chunkSize, chunkSize)
	}
}

// A trickle is not held until its pull ends (up to a second): a chunk leaves once its first
// message waited chunkLinger, while the pull goes on.
func TestTakeDoesNotHoldATrickle(t *testing.T) {
	msgs := make(chan jetstream.Msg)
	out := make(chan []jetstream.Msg, 10)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	done := make(chan int)
	go func() { done <- take(msgs, out, linger) }()
	for i := range 3 {
		msgs <- msgN{n: i}
		select {
		case c := <-out:
			if len(c) != 1 || c[0].(msgN).n != i {
				t.Fatalf("chunk %v, want message %d alone", c, i)
			}
		case <-time.After(time.Minute):
			t.Fatalf("message %d not handed over while its pull was open", i)
		}
	}
	close(msgs)
	if got := <-done; got != 3 {
		t.Errorf("took %d, want 3", got)
	}
	select {
	case c := <-out:
		t.Errorf("an empty pull's end sent a chunk of %d", len(c))
	default:
	}
}
