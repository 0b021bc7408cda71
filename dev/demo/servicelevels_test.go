package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/services/detector/slo"
)

// The demo's SLOs are the built-in ones with the workbook's windows ÷30, loadable by the detector,
// the factors and objectives unchanged.
func TestWriteScaledSLOs(t *testing.T) {
	dir := t.TempDir()
	defs, err := WriteScaledSLOs(dir, SLOScale)
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) == 0 {
		t.Fatal("no SLO written")
	}
	for _, d := range defs {
		data, err := os.ReadFile(filepath.Join(dir, d.Name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		back, err := slo.Parse("x.yaml", data)
		if err != nil {
			t.Fatalf("%s does not load: %v\n%s", d.Name, err, data)
		}
		page, ticket := back.Alerts.PageWindows(), back.Alerts.TicketWindows()
		if len(page) != 2 || page[0].Long.D() != 2*time.Minute || page[0].Short.D() != 10*time.Second || page[0].Factor != 14.4 ||
			page[1].Long.D() != 12*time.Minute || page[1].Short.D() != time.Minute || page[1].Factor != 6 {
			t.Errorf("%s: page windows %+v", d.Name, page)
		}
		if len(ticket) != 2 || ticket[1].Long.D() != 144*time.Minute || ticket[1].Factor != 1 {
			t.Errorf("%s: ticket windows %+v", d.Name, ticket)
		}
		if len(back.Objectives.List()) == 0 || back.Period.D() != slo.DefaultPeriod {
			t.Errorf("%s: objectives %+v over %s", d.Name, back.Objectives.List(), back.Period)
		}
	}
}

func TestPageCheck(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	page := func(status string, s, startsAt int, objective string) Received {
		return Received{At: at(s), Rule: TTFTPage, Status: status, StartsAt: at(startsAt), Fingerprint: "fp-" + objective,
			Labels: map[string]string{"objective": objective, "severity": "critical"}}
	}
	alerts := []Received{
		page("firing", 100, 100, "ttft"), page("firing", 110, 100, "ttft"), page("resolved", 150, 100, "ttft"),
		page("firing", 120, 120, "tpot"),
	}
	eps := PageEpisodes(alerts, TTFTPage, "ttft", at(90))
	if c := PageCheck(eps, start); !c.OK || !strings.Contains(c.Text, "fired at +100 s, resolved at +150 s") {
		t.Errorf("one episode resolved: %+v", c)
	}
	again := append(alerts, page("firing", 200, 200, "ttft"))
	if c := PageCheck(PageEpisodes(again, TTFTPage, "ttft", at(90)), start); c.OK {
		t.Errorf("a second firing passed: %+v", c)
	}
	if c := PageCheck(PageEpisodes(alerts[:2], TTFTPage, "ttft", at(90)), start); c.OK {
		t.Errorf("an unresolved page passed: %+v", c)
	}
	if c := PageCheck(PageEpisodes(alerts, TTFTPage, "ttft", at(101)), start); c.OK {
		t.Errorf("a page before the overload counted: %+v", c)
	}
}

func TestHeadroomCheck(t *testing.T) {
	p := func(v float64) *float64 { return &v }
	fq := FirstQueue{RPS: 13}
	for _, c := range []struct {
		predicted *float64
		ok        bool
	}{{p(13), true}, {p(16.9), true}, {p(9.2), true}, {p(17), false}, {p(9), false}, {nil, false}} {
		if got := HeadroomCheck(c.predicted, fq); got.OK != c.ok {
			t.Errorf("predicted %v against 13: %+v", c.predicted, got)
		}
	}
	if HeadroomCheck(p(13), FirstQueue{}).OK {
		t.Error("no queue passed")
	}
}
