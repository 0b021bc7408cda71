package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/requestfixture"
	"github.com/servescope/servescope/dev/testenv"
)

// TestRequestCommand runs `servescope request` as an on-call engineer would on a demo-shaped
// overload request: its gateway request id, its response id (chatcmpl-…) and its trace id print the
// same request; a reused X-Request-Id prints the list and --arrival picks one; an unknown id is a
// clear error with exit 1. It sets the process environment, so it does not run in parallel.
func TestRequestCommand(t *testing.T) {
	conn, cfg := testenv.ClickHouse(t)
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", cfg.Database)
	t.Setenv("SERVESCOPE_CLICKHOUSE_ADDR", strings.Join(cfg.Addr, ","))
	t.Setenv("DETECTOR_RULES_DIR", "")
	now := time.Now().UTC()
	over := requestfixture.Tell(requestfixture.Overload("vllm-0"), now.Add(-10*time.Minute))
	reused := requestfixture.Overload("vllm-0")
	reused.RequestID = "caller-42"
	first := requestfixture.Tell(reused, now.Add(-8*time.Minute))
	second := requestfixture.Tell(reused, now.Add(-7*time.Minute))
	events := append(append(over.Events, first.Events...), second.Events...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := requestfixture.Insert(ctx, conn, events...); err != nil {
		t.Fatal(err)
	}

	type shown struct {
		RequestID string    `json:"request_id"`
		ArrivalTS time.Time `json:"arrival_ts"`
		MatchedBy string    `json:"matched_by"`
		Timeline  []struct {
			Name    string   `json:"name"`
			Seconds *float64 `json:"seconds"`
			Source  string   `json:"source"`
		} `json:"timeline"`
		State struct {
			SamplesBefore struct {
				Running *float64 `json:"running"`
				Waiting *float64 `json:"waiting"`
			} `json:"sample_before"`
			SlotLimit *int `json:"slot_limit"`
		} `json:"engine_state_at_arrival"`
	}
	by := map[string]string{"request_id": over.RequestID, "response_id": over.ResponseID, "trace_id": over.TraceID}
	for kind, id := range by {
		out, code, err := run(t, "request", id, "--json")
		if code != 0 {
			t.Fatalf("request %s (%s): exit %d, %v", id, kind, code, err)
		}
		var r shown
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("request %s --json: %v\n%s", id, err, out)
		}
		if r.RequestID != over.RequestID || !r.ArrivalTS.Equal(over.Arrival) || r.MatchedBy != kind {
			t.Errorf("request %s (%s) shows request %s at %s matched by %s, want %s at %s", id, kind, r.RequestID, r.ArrivalTS, r.MatchedBy, over.RequestID, over.Arrival)
		}
		queue := false
		for _, s := range r.Timeline {
			queue = queue || (s.Name == "queue" && s.Seconds != nil && *s.Seconds == 0.472 && s.Source == "engine span")
		}
		if !queue || r.State.SamplesBefore.Running == nil || *r.State.SamplesBefore.Running != 256 || *r.State.SamplesBefore.Waiting != 44 ||
			r.State.SlotLimit == nil || *r.State.SlotLimit != 256 {
			t.Errorf("request %s (%s): timeline %+v, state %+v", id, kind, r.Timeline, r.State)
		}
		// The text form names the same request and how to open it in the console.
		text, code, err := run(t, "request", id)
		if code != 0 || !strings.HasPrefix(text, "request "+over.RequestID+"\n") || !strings.Contains(text, "In the console: /request/"+over.RequestID) {
			t.Errorf("request %s: exit %d, %v\n%s", id, code, err, text)
		}
	}

	out, code, err := run(t, "request", "caller-42")
	if code != 0 || !strings.Contains(out, "2 requests carry the id caller-42") || !strings.Contains(out, first.Arrival.Format("2006-01-02T15:04:05.000000Z07:00")) {
		t.Errorf("a reused X-Request-Id: exit %d, %v\n%s", code, err, out)
	}
	out, code, err = run(t, "request", "caller-42", "--arrival", first.Arrival.Format(time.RFC3339Nano), "--json")
	var r shown
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.ArrivalTS.Equal(first.Arrival) {
		t.Errorf("--arrival: exit %d, %v, %+v", code, err, r)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"request", "chatcmpl-nonesuch"}, `no request found with id "chatcmpl-nonesuch"`},
		{[]string{"request", "caller-42", "--arrival", "yesterday"}, "--arrival"},
		{[]string{"request"}, "accepts 1 arg"},
	} {
		_, code, err := run(t, c.args...)
		if code != 1 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 1 saying %q", c.args, code, err, c.want)
		}
	}
}
