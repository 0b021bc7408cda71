package publish

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testLogger(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func rec(i int) *record {
	return &record{subject: "t.v1.app.record", msgID: fmt.Sprintf("id-%04d", i), data: []byte(fmt.Sprintf(`{"n":%d}`, i))}
}

func mustOpen(t *testing.T, dir string, maxBytes, segBytes int64, log *bytes.Buffer) *spool {
	t.Helper()
	s, err := openSpool(dir, FsyncNever, maxBytes, segBytes, testLogger(log))
	if err != nil {
		t.Fatalf("open spool: %v", err)
	}
	return s
}

// readAll replays the whole spool and returns the msg ids in order.
func readAll(t *testing.T, s *spool) []string {
	t.Helper()
	var ids []string
	for {
		recs, next, err := s.read(7)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if len(recs) == 0 {
			return ids
		}
		for _, r := range recs {
			ids = append(ids, r.msgID)
		}
		if _, err := s.commit(next, int64(len(recs))); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
}

func ids(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("id-%04d", i))
	}
	return out
}

func TestSpoolOrderAcrossSegmentsAndRestart(t *testing.T) {
	tests := []struct {
		name     string
		segBytes int64
		n        int
	}{
		{"one segment", 1 << 20, 50},
		{"many small segments", 200, 50},
		{"segment per record", 1, 20},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var log bytes.Buffer
			s := mustOpen(t, dir, 1<<30, tc.segBytes, &log)
			for i := range tc.n {
				if err := s.append(rec(i)); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
			}
			if err := s.close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, dir, 1<<30, tc.segBytes, &log)
			if p, _ := s.stats(); p != int64(tc.n) {
				t.Fatalf("pending after reopen = %d, want %d", p, tc.n)
			}
			got := readAll(t, s)
			if strings.Join(got, ",") != strings.Join(ids(0, tc.n), ",") {
				t.Fatalf("replayed %v, want %v", got, ids(0, tc.n))
			}
			if !s.isEmpty() {
				t.Fatal("spool not empty after replaying everything")
			}
			segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
			if len(segs) != 0 {
				t.Fatalf("segments left after full replay: %v", segs)
			}
			// Appending after a full replay starts over and still replays in order.
			for i := tc.n; i < tc.n+3; i++ {
				if err := s.append(rec(i)); err != nil {
					t.Fatal(err)
				}
			}
			if got := readAll(t, s); strings.Join(got, ",") != strings.Join(ids(tc.n, tc.n+3), ",") {
				t.Fatalf("after restart-over replayed %v", got)
			}
		})
	}
}

func TestSpoolCursorSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	s := mustOpen(t, dir, 1<<30, 150, &log)
	for i := range 30 {
		if err := s.append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	recs, next, err := s.read(12)
	if err != nil || len(recs) != 12 {
		t.Fatalf("read 12: %d records, %v", len(recs), err)
	}
	if _, err := s.commit(next, 12); err != nil {
		t.Fatal(err)
	}
	s.close()
	s = mustOpen(t, dir, 1<<30, 150, &log)
	if p, _ := s.stats(); p != 18 {
		t.Fatalf("pending after restart = %d, want 18", p)
	}
	if got := readAll(t, s); strings.Join(got, ",") != strings.Join(ids(12, 30), ",") {
		t.Fatalf("replayed %v, want %v", got, ids(12, 30))
	}
}

func TestSpoolSkipsTruncatedLastRecord(t *testing.T) {
	for _, cut := range []int{1, 4, 8, 9, 15} {
		t.Run(fmt.Sprintf("cut %d bytes", cut), func(t *testing.T) {
			dir := t.TempDir()
			var log bytes.Buffer
			s := mustOpen(t, dir, 1<<30, 1<<20, &log)
			for i := range 3 {
				if err := s.append(rec(i)); err != nil {
					t.Fatal(err)
				}
			}
			s.close()
			segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
			if len(segs) != 1 {
				t.Fatalf("segments = %v", segs)
			}
			info, _ := os.Stat(segs[0])
			if err := os.Truncate(segs[0], info.Size()-int64(cut)); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, dir, 1<<30, 1<<20, &log)
			if !strings.Contains(log.String(), "partly written record") {
				t.Fatalf("no warning logged; log:\n%s", log.String())
			}
			if err := s.append(rec(3)); err != nil {
				t.Fatal(err)
			}
			got := readAll(t, s)
			want := []string{"id-0000", "id-0001", "id-0003"}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("replayed %v, want %v", got, want)
			}
		})
	}
}

func TestSpoolCorruptRecordEndsSegment(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	s := mustOpen(t, dir, 1<<30, 1<<20, &log)
	for i := range 4 {
		if err := s.append(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	s.close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	b, _ := os.ReadFile(segs[0])
	size := rec(0).size()
	b[size+recordHeaderBytes+5] ^= 0xFF // a payload byte of the second record
	if err := os.WriteFile(segs[0], b, 0o640); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, 1<<30, 1<<20, &log)
	if !strings.Contains(log.String(), "corrupt record") || !strings.Contains(log.String(), "level=ERROR") {
		t.Fatalf("corruption not logged as an error; log:\n%s", log.String())
	}
	if got := readAll(t, s); strings.Join(got, ",") != "id-0000" {
		t.Fatalf("replayed %v, want [id-0000]", got)
	}
}

func TestSpoolCap(t *testing.T) {
	dir := t.TempDir()
	var log bytes.Buffer
	one := rec(0).size()
	s := mustOpen(t, dir, 5*one, 2*one, &log)
	for i := range 5 {
		if err := s.append(rec(i)); err != nil {
			t.Fatalf("append %d under the cap: %v", i, err)
		}
	}
	if err := s.append(rec(5)); err != errSpoolFull {
		t.Fatalf("append over the cap = %v, want errSpoolFull", err)
	}
	// Replaying frees room again.
	recs, next, err := s.read(2)
	if err != nil || len(recs) != 2 {
		t.Fatalf("read: %d, %v", len(recs), err)
	}
	if _, err := s.commit(next, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.append(rec(6)); err != nil {
		t.Fatalf("append after replay freed a segment: %v", err)
	}
	if got := readAll(t, s); strings.Join(got, ",") != "id-0002,id-0003,id-0004,id-0006" {
		t.Fatalf("replayed %v", got)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []record{
		{subject: "s", msgID: "", data: nil},
		{subject: "servescope.v1.request.finished", msgID: "2a9f", data: []byte(`{"a":"ü"}`)},
		{subject: strings.Repeat("x", 0xFFFF), msgID: strings.Repeat("y", 100), data: bytes.Repeat([]byte("z"), 1<<20)},
	}
	for i, r := range tests {
		b, err := appendRecord(nil, &r)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if int64(len(b)) != r.size() {
			t.Fatalf("case %d: encoded %d bytes, size() = %d", i, len(b), r.size())
		}
		rr := &recordReader{r: bytes.NewReader(b)}
		got, n, err := rr.next()
		if err != nil || n != int64(len(b)) || got.subject != r.subject || got.msgID != r.msgID || !bytes.Equal(got.data, r.data) {
			t.Fatalf("case %d: round trip gave %q %q %d bytes, n=%d, err=%v", i, got.subject, got.msgID, len(got.data), n, err)
		}
	}
	if _, err := appendRecord(nil, &record{subject: strings.Repeat("x", 1<<16)}); err == nil {
		t.Fatal("a 64 KiB subject was accepted")
	}
}
