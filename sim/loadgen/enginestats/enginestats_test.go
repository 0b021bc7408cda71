package enginestats

import (
	"os"
	"strings"
	"testing"
)

func TestParseAndMean(t *testing.T) {
	before, err := os.ReadFile("testdata/before.prom")
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile("testdata/after.prom")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse(strings.NewReader(string(before)))
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(strings.NewReader(string(after)))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		wantMean  float64
		wantCount float64
		wantOK    bool
	}{
		{QueueTime, 0.25, 4, true}, // (1.5-0.5)/(6-2)
		{TTFT, 0.1, 2, true},       // two engines summed: (0.3-0.1)/(3-1)
		{DecodeTime, 0, 0, false},  // no new observation
		{"vllm:missing_seconds", 0, 0, false},
	}
	for _, tc := range tests {
		mean, n, ok := Mean(b, a, tc.name)
		if ok != tc.wantOK || n != tc.wantCount || (ok && !near(mean, tc.wantMean)) {
			t.Errorf("%s: mean=%v n=%v ok=%v, want %v %v %v", tc.name, mean, n, ok, tc.wantMean, tc.wantCount, tc.wantOK)
		}
	}
	m := Maxima{}
	m.Observe(b)
	m.Observe(a)
	if m[Running] != 7 || m[Waiting] != 3 || !near(m[KVCacheUsage], 0.28) {
		t.Errorf("maxima = %v", m)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestParseRejectsGarbage(t *testing.T) {
	if _, err := Parse(strings.NewReader("vllm:x{ 1\n")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{"testdata/before.prom", "testdata/after.prom"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(strings.NewReader(text))
		if err != nil {
			return
		}
		for name, h := range s.Histograms {
			if h.Count < 0 {
				t.Fatalf("%s: negative count", name)
			}
		}
	})
}
