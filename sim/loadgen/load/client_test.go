package load

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestReadStream(t *testing.T) {
	tests := []struct {
		file       string
		wantKind   string
		wantOut    int
		wantIn     int
		wantFinish string
		wantTTFT   bool
	}{
		{file: "chat_stream_usage.sse", wantOut: 6, wantIn: 23, wantFinish: "length", wantTTFT: true},
		{file: "completion_no_usage.sse", wantOut: 3, wantFinish: "stop", wantTTFT: true},
		{file: "stream_error.sse", wantKind: ErrKindStreamError, wantOut: 1, wantTTFT: true},
		{file: "truncated.sse", wantKind: ErrKindTruncated, wantTTFT: true},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			f, err := os.Open("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res := readStream(context.Background(), f, time.Now())
			if res.errKind != tc.wantKind {
				t.Fatalf("kind %q (%s), want %q", res.errKind, res.errMessage, tc.wantKind)
			}
			if tc.wantKind == "" && (res.completionTokens != tc.wantOut || res.promptTokens != tc.wantIn || res.finishReason != tc.wantFinish) {
				t.Fatalf("result %+v", res)
			}
			if (res.ttft > 0) != tc.wantTTFT {
				t.Fatalf("ttft %v", res.ttft)
			}
		})
	}
}

func TestPlainContentChunk(t *testing.T) {
	tests := []struct {
		data             string
		nonEmpty, isFast bool
	}{
		{`{"choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":null}]}`, true, true},
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`, false, true},
		{`{"choices":[{"index":0,"text":"x","logprobs":null,"finish_reason":null}]}`, true, true},
		{`{"choices":[{"index":0,"delta":{"content":" hi"},"logprobs":null,"finish_reason":"length"}]}`, false, false},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, false, false},
		{`{"error":{"message":"boom"}}`, false, false},
		{`{"choices":[{"index":0,"delta":{"content":"\"finish_reason\":null"},"finish_reason":"stop"}]}`, false, false},
	}
	for _, tc := range tests {
		nonEmpty, ok := plainContentChunk([]byte(tc.data))
		if ok != tc.isFast || (ok && nonEmpty != tc.nonEmpty) {
			t.Errorf("%s: nonEmpty=%v ok=%v, want %v %v", tc.data, nonEmpty, ok, tc.nonEmpty, tc.isFast)
		}
	}
}

func FuzzReadStream(f *testing.F) {
	for _, name := range []string{"chat_stream_usage.sse", "stream_error.sse", "truncated.sse", "completion_no_usage.sse"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, body string) {
		res := readStream(context.Background(), strings.NewReader(body), time.Now())
		if res.errKind == "" && !strings.Contains(body, "[DONE]") {
			t.Fatalf("success without [DONE]: %+v", res)
		}
		if res.completionTokens < 0 || res.promptTokens < 0 {
			t.Fatalf("negative counts: %+v", res)
		}
	})
}

func TestArrivals(t *testing.T) {
	u := arrivals("uniform", 2, 5*time.Second, 0, 1)
	if len(u) != 10 || u[1] != 500*time.Millisecond || u[9] != 4500*time.Millisecond {
		t.Fatalf("uniform arrivals %v", u)
	}
	p := arrivals("poisson", 14, 30*time.Second, 0, 1)
	if len(p) < 360 || len(p) > 480 {
		t.Fatalf("%d Poisson arrivals at 14/s over 30 s", len(p))
	}
	for i := 1; i < len(p); i++ {
		if p[i] < p[i-1] || p[i] >= 30*time.Second {
			t.Fatalf("arrival %d at %s out of order", i, p[i])
		}
	}
	again := arrivals("poisson", 14, 30*time.Second, 0, 1)
	if len(again) != len(p) || again[100] != p[100] {
		t.Fatal("seeded arrivals differ")
	}
	if n := arrivals("poisson", 1, 0, 7, 3); len(n) != 7 {
		t.Fatalf("%d arrivals for --requests 7", len(n))
	}
}

func TestResolveRejectsBadInput(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Target: "http://x", Scenario: "nope"},
		{Target: "http://x", Rate: -1},
		{Target: "http://x", Endpoint: "embeddings"},
		{Target: "http://x", Arrival: "bursty"},
		{Target: "http://x", Concurrency: -1},
		{Target: "http://x", StreamShare: share(-0.1)},
		{Target: "http://x", StreamShare: share(1.5)},
		{Target: "http://x", StreamShare: share(math.NaN())},
		{Target: "http://x", StreamShare: share(0.5), Stream: new(bool)},
	} {
		if _, err := resolve(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func share(v float64) *float64 { return &v }

// The stream share picks ⌈n·share⌉ of n requests, spread evenly, the first one included.
func TestStreamShare(t *testing.T) {
	no := false
	for _, tc := range []struct {
		cfg     Config
		n       int
		pattern string // s: streams, j: one JSON body
	}{
		{Config{}, 4, "ssss"},
		{Config{Stream: &no}, 4, "jjjj"},
		{Config{StreamShare: share(1)}, 4, "ssss"},
		{Config{StreamShare: share(0)}, 4, "jjjj"},
		{Config{StreamShare: share(0.5)}, 6, "sjsjsj"},
		{Config{StreamShare: share(0.25)}, 8, "sjjjsjjj"},
		{Config{StreamShare: share(0.75)}, 8, "sssjsssj"},
		{Config{StreamShare: share(1.0 / 3)}, 7, "sjjsjjs"},
	} {
		cfg := tc.cfg
		cfg.Target, cfg.Requests = "http://x", tc.n
		r, err := resolve(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		for i := range tc.n {
			if r.streams(i) {
				got.WriteByte('s')
			} else {
				got.WriteByte('j')
			}
		}
		if got.String() != tc.pattern {
			t.Errorf("%+v: %s, want %s", tc.cfg, got.String(), tc.pattern)
		}
	}
}
