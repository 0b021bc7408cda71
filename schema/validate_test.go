package schema_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/servescope/servescope/schema"
)

func TestFullEventsAreValid(t *testing.T) {
	for _, e := range fullEvents() {
		if err := e.ValidateAt(now); err != nil {
			t.Errorf("%s: %v", e.Kind(), err)
		}
	}
}

func TestValidateAtFields(t *testing.T) {
	tests := []struct {
		name   string
		kind   schema.Kind
		change func(e schema.Event)
		fields []string
	}{
		{"wrong schema in struct", schema.KindAppRecord, func(e schema.Event) { e.Head().Schema = "app.record/v2" }, []string{"schema"}},
		{"event_id over 128 bytes", schema.KindAppRecord, func(e schema.Event) { e.Head().EventID = strings.Repeat("k", 129) }, []string{"event_id"}},
		{"invalid UTF-8 in request_id", schema.KindEngineLog, func(e schema.Event) { e.Head().RequestID = "chatcmpl-\xc3" }, []string{"request_id"}},
		{"invalid UTF-8 in a version label", schema.KindRequestStarted, func(e schema.Event) { e.(*schema.RequestStarted).PromptVersion = "v\xff" }, []string{"prompt_version"}},
		{"empty passage id and NaN score", schema.KindAppRecord, func(e schema.Event) {
			r := e.(*schema.AppRecord)
			r.Passages[1].ID = ""
			r.Passages[2].Score = math.NaN()
		}, []string{"passages[1].id", "passages[2].score"}},
		{"too many passages", schema.KindAppRecord, func(e schema.Event) {
			r := e.(*schema.AppRecord)
			r.SetPassages(make([]schema.Passage, 1001))
			for i := range r.Passages {
				r.Passages[i].ID = fmt.Sprint("p", i)
			}
		}, []string{"passages"}},
		{"infinite retrieval_top_score and negative retrieval_s", schema.KindAppRecord, func(e schema.Event) {
			r := e.(*schema.AppRecord)
			r.RetrievalTopScore = ptr(math.Inf(1))
			r.RetrievalSeconds = ptr(-0.1)
		}, []string{"retrieval_top_score", "retrieval_s"}},
		{"missing engine", schema.KindEngineSample, func(e schema.Event) { e.(*schema.EngineSample).Engine = "" }, []string{"engine"}},
		{"negative kv_cache_usage_perc", schema.KindEngineSample, func(e schema.Event) { e.(*schema.EngineSample).KVCacheUsagePerc = ptr(-0.5) }, []string{"kv_cache_usage_perc"}},
		{"too many buckets", schema.KindEngineSample, func(e schema.Event) {
			e.(*schema.EngineSample).Histograms["x"] = schema.Histogram{Buckets: make([]schema.Bucket, 201)}
		}, []string{"histograms[x].buckets"}},
		{"too many metrics", schema.KindEngineSample, func(e schema.Event) {
			s := e.(*schema.EngineSample)
			for i := range 2000 {
				s.Gauges[fmt.Sprint("g", i)] = 1
			}
		}, []string{""}},
		{"NaN span temperature and negative ttft", schema.KindEngineSpan, func(e schema.Event) {
			s := e.(*schema.EngineSpan)
			s.Temperature = ptr(math.NaN())
			s.TTFTSeconds = ptr(-1.0)
		}, []string{"ttft_s", "temperature"}},
		{"span start before 2000", schema.KindEngineSpan, func(e schema.Event) { e.(*schema.EngineSpan).StartTS = time.Date(1970, 1, 1, 0, 0, 1, 0, time.UTC) }, []string{"start_ts"}},
		{"span_id over 16 bytes", schema.KindEngineSpan, func(e schema.Event) { e.(*schema.EngineSpan).SpanID = "00f067aa0ba902b7ff" }, []string{"span_id"}},
		{"log line over 16 KiB", schema.KindEngineLog, func(e schema.Event) { e.(*schema.EngineLog).Line = strings.Repeat("l", 16<<10+1) }, []string{"line"}},
		{"too many frames, one invalid", schema.KindEngineLog, func(e schema.Event) {
			l := e.(*schema.EngineLog)
			l.Frames = make([]string, 65)
			l.Frames[64] = "\xff"
		}, []string{"frames", "frames[64]"}},
		{"request.started without endpoint or arrival", schema.KindRequestStarted, func(e schema.Event) {
			r := e.(*schema.RequestStarted)
			r.Endpoint = ""
			r.ArrivalTS = time.Time{}
		}, []string{"arrival_ts", "endpoint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := fullEvent(t, tt.kind)
			tt.change(e)
			err := e.ValidateAt(now)
			var ve schema.ValidationErrors
			if !errors.As(err, &ve) {
				t.Fatalf("ValidateAt = %v, want ValidationErrors", err)
			}
			if got := fieldsOf(err); !equalStrings(got, tt.fields) {
				t.Errorf("error fields %q, want %q (%v)", got, tt.fields, err)
			}
			if _, err := schema.Encode(e); err == nil {
				t.Errorf("Encode accepted the invalid event")
			}
		})
	}
}

func TestValidationErrorsText(t *testing.T) {
	err := schema.ValidationErrors{{Field: "ttft_s", Reason: "negative duration -1"}, {Field: "", Reason: "event is 2000000 bytes"}}
	want := "invalid event: ttft_s: negative duration -1; event is 2000000 bytes"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		max  int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"héllo", 2, "h"},  // é is 2 bytes: cutting inside it drops it
		{"héllo", 3, "hé"}, // ...and cutting after it keeps it
		{"日本語", 4, "日"},    // 3-byte runes
		{"日本語", 6, "日本"},
		{"a😀b", 4, "a"}, // 4-byte rune
		{"a😀b", 5, "a😀"},
		{"😀", 3, ""},
	}
	for _, tt := range tests {
		if got := schema.Truncate(tt.s, tt.max); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.want)
		}
	}
	// Every cut of a mixed-width string stays valid UTF-8, within max, and as long as possible.
	s := "aé日😀" + strings.Repeat("ß€𝄞", 5)
	for max := 0; max <= len(s)+1; max++ {
		got := schema.Truncate(s, max)
		if !utf8.ValidString(got) || len(got) > max || !strings.HasPrefix(s, got) {
			t.Fatalf("Truncate(%q, %d) = %q", s, max, got)
		}
		if len(got) < max && len(got) < len(s) {
			_, size := utf8.DecodeRuneInString(s[len(got):])
			if len(got)+size <= max {
				t.Fatalf("Truncate(%q, %d) = %q cut a whole rune too many", s, max, got)
			}
		}
	}
}

func TestSetPassages(t *testing.T) {
	tests := []struct {
		name   string
		scores []float64
		want   *float64
	}{
		{"none", nil, nil},
		{"one", []float64{0.4}, ptr(0.4)},
		{"best not first", []float64{0.71, 0.93, 0.12}, ptr(0.93)},
		{"all negative", []float64{-0.3, -0.1, -0.7}, ptr(-0.1)},
		{"ties", []float64{0.5, 0.5}, ptr(0.5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := schema.NewAppRecord("r1", "support-bot", now)
			r.RetrievalTopScore = ptr(99.0) // a stale value must be replaced
			var ps []schema.Passage
			for i, s := range tt.scores {
				ps = append(ps, schema.Passage{ID: fmt.Sprint("p", i), Score: s})
			}
			r.SetPassages(ps)
			if len(r.Passages) != len(ps) {
				t.Fatalf("Passages has %d, want %d", len(r.Passages), len(ps))
			}
			switch {
			case tt.want == nil && r.RetrievalTopScore != nil:
				t.Errorf("RetrievalTopScore = %v, want absent", *r.RetrievalTopScore)
			case tt.want != nil && (r.RetrievalTopScore == nil || *r.RetrievalTopScore != *tt.want):
				t.Errorf("RetrievalTopScore = %v, want %v", r.RetrievalTopScore, *tt.want)
			}
			if len(ps) > 0 {
				// The top score is a copy, not a pointer into the slice.
				ps[0].Score = 1000
				if *r.RetrievalTopScore == 1000 && tt.want != nil && *tt.want != 1000 {
					t.Errorf("RetrievalTopScore aliases a passage's score")
				}
			}
		})
	}
}
