package demo

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
)

type oneRow struct{ name string }

func (o oneRow) Name() string { return o.name }
func (o oneRow) Eval(context.Context, time.Time) ([]rules.Sample, error) {
	return []rules.Sample{{Value: 1, Firing: true}}, nil
}

// The demo reads the detector's own metrics, as the detector registers them, after a group ran.
func TestScrapeDetectorStats(t *testing.T) {
	reg := prometheus.NewRegistry()
	var rs []*alerting.Rule
	for _, name := range []string{"a", "b"} {
		d, err := rules.Parse(name+".yaml", []byte("name: "+name+"\nseverity: warning\nwindow: 5m\nsummary: x\nquery: SELECT 1\n"))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, alerting.NewRule(d, oneRow{name}))
	}
	g := &alerting.Group{Interval: 2 * time.Second, Rules: rs, Metrics: alerting.NewMetrics(reg), Concurrency: 2}
	for i := range 3 {
		if err := g.Eval(context.Background(), time.Unix(int64(i*2), 0)); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	st, err := ScrapeDetectorStats(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if st.Missed != 0 || st.Evaluations["a"] != 3 || st.Evaluations["b"] != 3 || len(st.MeanS) != 2 {
		t.Fatalf("stats %+v, want 0 missed and 3 evaluations of a and b", st)
	}
	var out bytes.Buffer
	WriteDetectorStats(&out, st)
	if !strings.Contains(out.String(), "0 evaluation ticks missed") || !strings.Contains(out.String(), "over 2 rules") {
		t.Fatalf("printed %q", out.String())
	}

	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer bare.Close()
	if _, err := ScrapeDetectorStats(context.Background(), bare.URL); err == nil || !strings.Contains(err.Error(), "does not expose") {
		t.Fatalf("a detector without the group metrics: err %v", err)
	}
}
