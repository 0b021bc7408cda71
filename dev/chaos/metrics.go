package chaos

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeCounters reads a service's /metrics and returns the sum of each named counter or gauge
// over its series; a series that has a label of match with another value is left out.
func scrapeCounters(ctx context.Context, url string, match map[string]string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of %s: %w", url, err)
	}
	out := map[string]float64{}
	for _, name := range names {
		f, ok := fams[name]
		if !ok {
			return nil, fmt.Errorf("%s does not expose %s", url, name)
		}
		for _, m := range f.GetMetric() {
			if !labelsMatch(m, match) {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name] += m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] += m.GetGauge().GetValue()
			default:
				out[name] += m.GetUntyped().GetValue()
			}
		}
	}
	return out, nil
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range match {
		if got, ok := have[k]; ok && got != v {
			return false
		}
	}
	return true
}
