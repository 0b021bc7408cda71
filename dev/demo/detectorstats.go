package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DetectorStats is how the detector kept up with its ticks, from its own /metrics.
type DetectorStats struct {
	// Missed is servescope_detector_group_iterations_missed_total over the groups: ticks skipped
	// because an evaluation was still running (each delays alerts by an interval).
	Missed float64
	// Evaluations and MeanS are the number of rule evaluations and their mean time in seconds,
	// per rule (servescope_detector_rule_evaluation_duration_seconds).
	Evaluations map[string]uint64
	MeanS       map[string]float64
}

// ScrapeDetectorStats reads DetectorStats from the detector's /metrics at metricsURL.
func ScrapeDetectorStats(ctx context.Context, metricsURL string) (DetectorStats, error) {
	st := DetectorStats{Evaluations: map[string]uint64{}, MeanS: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("scrape %s: %w", metricsURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("scrape %s: %s", metricsURL, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return st, fmt.Errorf("parse metrics of %s: %w", metricsURL, err)
	}
	missed, ok := fams["servescope_detector_group_iterations_missed_total"]
	if !ok {
		return st, fmt.Errorf("%s does not expose servescope_detector_group_iterations_missed_total", metricsURL)
	}
	for _, m := range missed.GetMetric() {
		st.Missed += m.GetCounter().GetValue()
	}
	for _, m := range fams["servescope_detector_rule_evaluation_duration_seconds"].GetMetric() {
		var rule string
		for _, l := range m.GetLabel() {
			if l.GetName() == "rule" {
				rule = l.GetValue()
			}
		}
		h := m.GetHistogram()
		if h.GetSampleCount() > 0 {
			st.Evaluations[rule] = h.GetSampleCount()
			st.MeanS[rule] = h.GetSampleSum() / float64(h.GetSampleCount())
		}
	}
	return st, nil
}

// WriteDetectorStats prints st: the ticks missed and the slowest rules' mean evaluation time.
func WriteDetectorStats(w io.Writer, st DetectorStats) {
	rules := make([]string, 0, len(st.MeanS))
	var sum float64
	for r, s := range st.MeanS {
		rules = append(rules, r)
		sum += s
	}
	sort.Slice(rules, func(i, j int) bool { return st.MeanS[rules[i]] > st.MeanS[rules[j]] })
	fmt.Fprintf(w, "  detector: %.0f evaluation ticks missed (an evaluation still running when the next was due)", st.Missed)
	if len(rules) > 0 {
		fmt.Fprintf(w, "; mean evaluation per rule %.0f ms summed over %d rules, slowest %s %.0f ms",
			sum*1000, len(rules), rules[0], st.MeanS[rules[0]]*1000)
	}
	fmt.Fprintln(w)
}
