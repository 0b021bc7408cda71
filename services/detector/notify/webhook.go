// Package notify delivers alerts to webhook receivers in the Prometheus Alertmanager webhook format
// (version 4), so receivers written for Alertmanager work unchanged.
//
// Delivery is separate from evaluation: Send only enqueues. Each receiver has its own bounded queue
// and goroutine that sends batches (one POST per alertname), retries failures with capped exponential
// backoff and jitter, signs bodies with HMAC-SHA256 when a secret is set, and records every attempt.
//
// A state change is delivered to a receiver when the receiver answered 2xx: only then does its
// attempt row (alert_deliveries, with each alert's fingerprint, status and startsAt) say ok, and
// [CHRecorder.Accepted] reads those rows back so that a restarted detector sends each receiver what
// it lacks. Queues live in memory: what they held when the process stopped is found that way.
// Delivery is at least once: a crash between the 2xx and the insert of its row sends the state
// change again, and receivers de-duplicate by fingerprint, status and startsAt.
package notify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"time"
)

// SignatureHeader carries "sha256=<hex HMAC-SHA256 of the request body>" when a secret is set.
const SignatureHeader = "X-Servescope-Signature"

// Alert is one alert in a webhook message (Alertmanager's template.Alert).
type Alert struct {
	// Status is "firing" or "resolved".
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	// StartsAt is when the alert became active; EndsAt when it resolved (zero time while firing,
	// serialised as 0001-01-01T00:00:00Z as Alertmanager does).
	StartsAt     time.Time `json:"startsAt"`
	EndsAt       time.Time `json:"endsAt"`
	GeneratorURL string    `json:"generatorURL"`
	Fingerprint  string    `json:"fingerprint"`
}

// Message is the webhook body (Alertmanager webhook version 4).
type Message struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []Alert           `json:"alerts"`
}

// NewMessage builds the message for alerts of one group (same alertname): status is "firing" when
// any alert fires, common labels and annotations are those all alerts share.
func NewMessage(receiver, externalURL string, alerts []Alert) Message {
	m := Message{
		Version: "4", Status: "resolved", Receiver: receiver, ExternalURL: externalURL,
		GroupLabels: map[string]string{}, CommonLabels: map[string]string{}, CommonAnnotations: map[string]string{},
		Alerts: alerts,
	}
	if len(alerts) == 0 {
		m.GroupKey = "{}:{}"
		return m
	}
	name := alerts[0].Labels["alertname"]
	m.GroupLabels["alertname"] = name
	m.GroupKey = `{}:{alertname="` + name + `"}`
	m.CommonLabels = common(alerts, func(a Alert) map[string]string { return a.Labels })
	m.CommonAnnotations = common(alerts, func(a Alert) map[string]string { return a.Annotations })
	for _, a := range alerts {
		if a.Status == "firing" {
			m.Status = "firing"
		}
	}
	return m
}

func common(alerts []Alert, get func(Alert) map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range get(alerts[0]) {
		out[k] = v
	}
	for _, a := range alerts[1:] {
		m := get(a)
		for k, v := range out {
			if m[k] != v {
				delete(out, k)
			}
		}
	}
	return out
}

// Sign returns the SignatureHeader value for body.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	_, _ = mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether header is a valid signature of body; receivers use it.
func Verify(secret, body []byte, header string) bool {
	return hmac.Equal([]byte(header), []byte(Sign(secret, body)))
}

// groupByName splits alerts by alertname, keeping their order within each group and ordering
// groups by first appearance.
func groupByName(alerts []Alert) [][]Alert {
	idx := map[string]int{}
	var groups [][]Alert
	for _, a := range alerts {
		name := a.Labels["alertname"]
		i, ok := idx[name]
		if !ok {
			i = len(groups)
			idx[name] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], a)
	}
	for _, g := range groups {
		sort.SliceStable(g, func(i, j int) bool { return g[i].Fingerprint < g[j].Fingerprint })
	}
	return groups
}
