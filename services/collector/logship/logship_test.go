package logship

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/schema"
)

type collected struct {
	mu     sync.Mutex
	events []*schema.EngineLog
}

func (c *collected) Publish(e schema.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e.(*schema.EngineLog))
	return nil
}

func (c *collected) lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.events))
	for i, e := range c.events {
		out[i] = e.Line
	}
	return out
}

func (c *collected) all() []*schema.EngineLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*schema.EngineLog(nil), c.events...)
}

var clock = func() time.Time { return time.Date(2025, 9, 12, 0, 0, 0, 0, time.UTC) }

// TestCrashLogStream ships a vLLM 0.10 crash log (docs/measurements.md, The crash) from a stream
// and checks what an operator reads from engine_logs after the engine is gone.
func TestCrashLogStream(t *testing.T) {
	raw, err := os.ReadFile("../../../internal/vllmlog/testdata/v0_10_crash.log")
	if err != nil {
		t.Fatal(err)
	}
	c := &collected{}
	sh := NewShipper(c, "vllm-a", "-", nil, clock, nil, nil)
	if err := sh.Stream(context.Background(), bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	got := c.lines()
	if len(got) != len(want) {
		t.Fatalf("%d lines published, want every one of %d", len(got), len(want))
	}
	var lastStats, oom *schema.EngineLog
	for i, e := range c.all() {
		if got[i] != want[i] {
			t.Fatalf("line %d out of order: %q", i, got[i])
		}
		if e.Running != nil && strings.HasPrefix(e.Message, "Engine 000:") {
			lastStats = e
		}
		if e.OOMBytesRequested != nil {
			oom = e
		}
		if e.Source != "-" || e.Offset == nil || e.Engine != "vllm-a" {
			t.Fatalf("line %d: source %q offset %v engine %q", i, e.Source, e.Offset, e.Engine)
		}
	}
	if lastStats == nil || *lastStats.Running != 193 || *lastStats.KVCacheUsagePerc != 0.159 || lastStats.EngineIndex != "0" {
		t.Errorf("last stats line: %+v", lastStats)
	}
	if oom == nil || *oom.OOMBytesRequested != 112<<20 || oom.ExceptionType != "torch.OutOfMemoryError" ||
		oom.Frames[len(oom.Frames)-1] != "vllm/model_executor/layers/utils.py:apply_penalties" || oom.EngineIndex != "0" {
		t.Errorf("OOM line: %+v", oom)
	}
	if want := time.Date(2025, 9, 11, 15, 53, 37, 0, time.UTC); !oom.TS.Equal(want) {
		t.Errorf("OOM ts %s, want the line's own %s", oom.TS, want)
	}
	// The offset of each line is where it starts in the stream.
	if off := *c.all()[1].Offset; off != uint64(len(want[0])+1) {
		t.Errorf("second line offset %d, want %d", off, len(want[0])+1)
	}
}

func TestStreamOddInput(t *testing.T) {
	long := strings.Repeat("x", MaxLineBytes+10)
	in := "a\r\nbad \xff utf8\n\n" + long + "\nlast without newline"
	c := &collected{}
	sh := NewShipper(c, "e", "-", nil, clock, nil, nil)
	if err := sh.Stream(context.Background(), strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	got := c.lines()
	// The over-long line ends in the same read as it grows past MaxLineBytes, so it is one line,
	// kept to the schema's 16 KiB.
	if len(got) != 5 {
		t.Fatalf("%d lines, want 5", len(got))
	}
	if got[0] != "a" || got[1] != "bad \uFFFD utf8" || got[2] != "" || len(got[3]) != 16<<10 || got[4] != "last without newline" {
		t.Errorf("lines %q, long line of %d bytes", []string{got[0], got[1], got[2], got[4]}, len(got[3]))
	}
	if ts := c.all()[0].TS; !ts.Equal(clock()) {
		t.Errorf("unstamped line ts %s, want the collector's clock", ts)
	}
}

type fileLog struct {
	t    *testing.T
	path string
}

func (l fileLog) append(lines ...string) {
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	defer f.Close()
	for _, s := range lines {
		if _, err := f.WriteString(s); err != nil {
			l.t.Fatal(err)
		}
	}
}

func waitLines(t *testing.T, c *collected, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous for a loaded machine; it returns as soon as they are in
	for time.Now().Before(deadline) {
		if got := c.lines(); len(got) >= n {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("got %d lines %q, want %d", len(c.lines()), c.lines(), n)
	return nil
}

// TestFollow drives a file through appends, a partial line, rotation by rename, truncation and a
// collector restart, and checks that each line is shipped exactly once, in order.
func TestFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vllm.log")
	statePath := filepath.Join(dir, "state", "offsets.json")
	log := fileLog{t, path}
	c := &collected{}

	rotations := make(chan string, 16)
	run := func() (stop func()) {
		state, err := OpenState(statePath)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		sh := NewShipper(c, "e", path, nil, nil, nil, nil)
		fl := &Follower{Path: path, State: state, Poll: 10 * time.Millisecond, OnRotate: func(what string) { rotations <- what }}
		go func() { done <- sh.Follow(ctx, fl) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("follow: %v", err)
			}
		}
	}

	stop := run() // the file does not exist yet
	log.append("l1\n", "l2\n", "l3-par")
	waitLines(t, c, 2)
	log.append("tial\n")
	waitLines(t, c, 3)

	// Rotation by rename: the old file gets one more line after the follower has seen the
	// rename (a writer that has not reopened yet), then a new file. A CI run lost that line when
	// the follower left the old file at the rename.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, rotations, "rotated")
	fileLog{t, path + ".1"}.append("l4-in-old\n")
	waitLines(t, c, 4) // two writers' files have no order between them: the test gives one
	log.append("l5-new\n")
	waitLines(t, c, 5)

	// Truncation in place (copytruncate).
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, rotations, "truncated")
	log.append("l6\n")
	waitLines(t, c, 6)
	stop()

	// Restart: nothing is sent again; new lines are.
	log.append("l7\n")
	stop = run()
	got := waitLines(t, c, 7)
	time.Sleep(100 * time.Millisecond)
	stop()
	want := []string{"l1", "l2", "l3-partial", "l4-in-old", "l5-new", "l6", "l7"}
	if fmt.Sprint(c.lines()) != fmt.Sprint(want) {
		t.Errorf("lines %q, want %q", got, want)
	}
	if off := *c.all()[6].Offset; off != 3 {
		t.Errorf("l7 offset %d, want 3 (after l6 in the truncated file)", off)
	}
}

// waitRotation waits for the follower's note of a rotation or truncation.
func waitRotation(t *testing.T, notes <-chan string, want string) {
	t.Helper()
	select {
	case got := <-notes:
		if got != want {
			t.Fatalf("follower noted %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the follower did not note %q in 30 s", want)
	}
}

// TestFollowRotatedFileWaitEnds: a file renamed away is read until RotateWait ends, and its last
// line without a newline is emitted then (nothing else will ever complete it).
func TestFollowRotatedFileWaitEnds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vllm.log")
	log := fileLog{t, path}
	log.append("a\n")
	state, err := OpenState(filepath.Join(dir, "offsets.json"))
	if err != nil {
		t.Fatal(err)
	}
	c := &collected{}
	rotations := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	fl := &Follower{Path: path, State: state, Poll: 10 * time.Millisecond, RotateWait: 200 * time.Millisecond,
		OnRotate: func(what string) { rotations <- what }}
	go func() { done <- NewShipper(c, "e", path, nil, nil, nil, nil).Follow(ctx, fl) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("follow: %v", err)
		}
	}()
	waitLines(t, c, 1)
	// The partial line is in the file before the rename, so it travels with the rotated file
	// however late the test runs after the rotation.
	log.append("b-partial")
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	waitRotation(t, rotations, "rotated")
	got := waitLines(t, c, 2) // no new file at all: the partial line comes when the wait ends
	if fmt.Sprint(got) != fmt.Sprint([]string{"a", "b-partial"}) {
		t.Errorf("lines %q, want [a b-partial]", got)
	}
	if off := *c.all()[1].Offset; off != 2 {
		t.Errorf("b-partial offset %d, want 2 (in the rotated file)", off)
	}
	// The position saved is the (absent) current file's, not the rotated one's.
	if p, ok := state.Get(path); ok && p != (Position{}) {
		t.Errorf("saved position %+v after the rotation, want none", p)
	}
}

func TestStateSurvivesTornFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "o.json")
	if err := os.WriteFile(p, []byte(`{"a":{"dev":1,`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := OpenState(p)
	if err != nil {
		t.Fatal(err)
	}
	s.Set("a", Position{Dev: 1, Ino: 2, Offset: 3})
	if err := s.Save(); err != nil {
		t.Fatal(err)
	}
	s2, _ := OpenState(p)
	if pos, ok := s2.Get("a"); !ok || pos.Offset != 3 {
		t.Errorf("reloaded %+v %v", pos, ok)
	}
}

func FuzzStream(f *testing.F) {
	raw, err := os.ReadFile("../../../internal/vllmlog/testdata/v0_10_crash.log")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte("a\nb"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &collected{}
		sh := NewShipper(c, "e", "-", nil, clock, nil, nil)
		if err := sh.Stream(context.Background(), bytes.NewReader(data)); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if n, want := len(c.lines()), bytes.Count(data, []byte("\n")); n < want {
			t.Fatalf("%d lines published, want at least %d", n, want)
		}
	})
}

// TestFollowStopsWithinABacklog: a follower stopped while it works through a long backlog
// returns within the chunk it is reading, not at the file's end (a trial's 96 MB log held a
// SIGTERM for 37 s), and the position it saved resumes after the last line it emitted.
func TestFollowStopsWithinABacklog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "vllm.log")
	line := strings.Repeat("x", 99) + "\n"
	fileLog{t, path}.append(strings.Repeat(line, 20_000)) // 2 MB: 30 of Run's 64 KiB reads
	state, err := OpenState(filepath.Join(dir, "offsets.json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	emitted := 0
	var last int64
	err = (&Follower{Path: path, State: state, Poll: 10 * time.Millisecond}).Run(ctx, func(_ []byte, off int64) error {
		emitted++
		last = off
		if emitted == 10 {
			cancel() // as SIGTERM would
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if emitted > 10+64<<10/len(line)+1 {
		t.Errorf("%d lines emitted after the stop at the 10th: the follower read on past its chunk", emitted)
	}
	if p, _ := state.Get(path); p.Offset != last+int64(len(line)) {
		t.Errorf("saved offset %d, want %d (after the last line emitted)", p.Offset, last+int64(len(line)))
	}
}

// TestDataParallelStatsLines ships vLLM main's data-parallel log (--data-parallel-size 2, the
// lines of vllm/v1/metrics/loggers.py LoggingStatLogger and AggregatedLoggingStatLogger) and
// checks that each stats line says how many engines its numbers cover: 1 for "Engine 00N:" and
// the dying engine's scheduler dump, 2 for "2 Engines Aggregated:" (whose Running is a sum), and
// that main's "Preemptions: N" is kept.
func TestDataParallelStatsLines(t *testing.T) {
	raw, err := os.ReadFile("../../../internal/vllmlog/testdata/main_dp2_colour.log")
	if err != nil {
		t.Fatal(err)
	}
	c := &collected{}
	sh := NewShipper(c, "vllm-dp", "-", nil, clock, nil, nil)
	if err := sh.Stream(context.Background(), bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	type want struct {
		index       string
		engines     uint16
		running     uint32
		preemptions *uint32
	}
	three := uint32(3)
	var got []want
	for _, e := range c.all() {
		if e.Running == nil {
			continue
		}
		w := want{index: e.EngineIndex, running: *e.Running, preemptions: e.Preemptions}
		if e.Engines != nil {
			w.engines = *e.Engines
		}
		got = append(got, w)
	}
	exp := []want{{"0", 1, 193, &three}, {"1", 1, 190, nil}, {"", 2, 390, nil}, {"1", 1, 190, nil}}
	if len(got) != len(exp) {
		t.Fatalf("stats lines %+v, want %+v", got, exp)
	}
	for i := range exp {
		g, w := got[i], exp[i]
		if g.index != w.index || g.engines != w.engines || g.running != w.running || (g.preemptions == nil) != (w.preemptions == nil) ||
			(g.preemptions != nil && *g.preemptions != *w.preemptions) {
			t.Errorf("stats line %d: %+v (preemptions %v), want %+v (preemptions %v)", i, g, g.preemptions, w, w.preemptions)
		}
	}
}
