package server

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/servescope/servescope/services/detector/alerting"
	"github.com/servescope/servescope/services/detector/rules"
)

// maxResolutions bounds the resolved rows one alerts page evaluates (each is one run of the
// rule's query); the latest come first.
const maxResolutions = 20

// Resolution is what a rule measured at the moment its alert resolved: the value it came back to,
// with the baseline and threshold of that evaluation. Note says why there are no figures.
type Resolution struct {
	Value     *float64 `json:"value"`
	Baseline  *float64 `json:"baseline"`
	Threshold *float64 `json:"threshold"`
	Note      string   `json:"note,omitempty"`
}

// resolutionCache keeps evaluations of past resolutions: a resolution's moment does not change.
type resolutionCache struct {
	mu sync.Mutex
	m  map[string]Resolution
}

func (c *resolutionCache) get(k string) (Resolution, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[k]
	return r, ok
}

func (c *resolutionCache) put(k string, r Resolution) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 2000 {
		c.m = map[string]Resolution{}
	}
	c.m[k] = r
}

// resolution evaluates the resolved alert a's rule at the row's time, as the detector evaluated it
// when it resolved the alert, and returns the figures of a's row of that evaluation: its labels
// made as the detector makes them (services/detector/alerting, Rule.Eval: the row's non-empty
// labels, the rule's own labels over them, alertname and severity) must give a's fingerprint.
// A rule the console does not load, or no row for the alert (the query returned nothing to
// measure, e.g. no request in the window), is said in Note.
func (s *Server) resolution(ctx context.Context, a AlertRow) Resolution {
	key := a.Rule + "\x00" + a.Fingerprint + "\x00" + a.TS.UTC().Format(time.RFC3339Nano)
	if r, ok := s.resolutions.get(key); ok {
		return r
	}
	var def *rules.Definition
	for _, d := range s.rules {
		if d.Name == a.Rule {
			def = d
		}
	}
	if def == nil {
		return Resolution{Note: "rule " + a.Rule + " is not among the rules the console loads (DETECTOR_RULES_DIR)"}
	}
	rule, err := rules.NewSQLRule(def, s.conn)
	if err != nil {
		return Resolution{Note: "rule " + a.Rule + ": " + err.Error()}
	}
	samples, err := rule.Eval(ctx, a.TS)
	if err != nil {
		// Not cached: the next page asks again.
		return Resolution{Note: fmt.Sprintf("evaluating %s at %s failed: %v", a.Rule, a.TS.UTC().Format(time.RFC3339), err)}
	}
	res := Resolution{Note: "the rule's query returned no row for these labels at the resolution: nothing left to measure (e.g. no request in its window)"}
	for _, smp := range samples {
		labels := map[string]string{}
		for k, v := range smp.Labels {
			if v != "" {
				labels[k] = v
			}
		}
		for k, v := range def.Labels {
			labels[k] = v
		}
		labels["alertname"], labels["severity"] = def.Name, def.Severity
		if alerting.Fingerprint(labels) != a.Fingerprint {
			continue
		}
		res = Resolution{Value: finite(smp.Value), Baseline: finite(smp.Baseline), Threshold: finite(smp.Threshold)}
		break
	}
	s.resolutions.put(key, res)
	return res
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}
