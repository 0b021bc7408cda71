package benchkit

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func historyFlags(t *testing.T, args ...string) HistoryFlags {
	t.Helper()
	var f HistoryFlags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Register(fs, time.Minute)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestHistoryFlagsSpec(t *testing.T) {
	now := time.Date(2026, 12, 2, 3, 4, 5, 0, time.UTC)
	s, err := historyFlags(t).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	if s.Requests != 100_000_000 || s.Span != 720*time.Hour || !s.End.Equal(now.Truncate(time.Minute)) || s.SampleInterval != time.Minute {
		t.Errorf("defaults: %+v", s)
	}
	s, err = historyFlags(t, "-end", "2026-12-02T04:10:00Z", "-requests", "1000", "-span", "48h").Spec(now)
	if err != nil || !s.End.Equal(time.Date(2026, 12, 2, 4, 10, 0, 0, time.UTC)) || s.Requests != 1000 {
		t.Errorf("-end: %+v, %v", s, err)
	}
	for args, want := range map[string]string{
		"-long-database x":       "both",
		"-short-database y":      "both",
		"-short 800h":            "within",
		"-generate 800h":         "within",
		"-end yesterday":         "-end",
		"-requests 0":            "Requests",
		"-engines 0 -short 1h":   "Engines",
		"-short 0s -generate 1h": "within",
	} {
		if _, err := historyFlags(t, strings.Fields(args)...).Spec(now); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one saying %q", args, err, want)
		}
	}
}
