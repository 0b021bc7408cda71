package alerting

import (
	"fmt"
	"hash/fnv"
	"sort"
	"testing"
)

// Fingerprints are persisted (alerts.fingerprint, alert_deliveries.fingerprints) and receivers
// de-duplicate on them, so the label set of a running alert must keep its fingerprint across an
// upgrade. Up to this version servescope hashed labels with its own code, kept here as
// fnvFingerprint; the values below were computed by it and are what existing tables hold.
var storedFingerprints = []struct {
	labels map[string]string
	want   string
}{
	{map[string]string{"alertname": "server_errors", "severity": "critical", "engine": "vllm-0", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ"}, "004ac7661cdf83c9"},
	{map[string]string{"alertname": "retrieval_score_drift", "severity": "warning", "app": "support-bot", "embedding_model_version": "bge-m3-1.0"}, "60ddc041995dbaab"},
	{map[string]string{"alertname": "slot_limit", "severity": "warning"}, "24f8dc72661d1d11"},
	{map[string]string{"alertname": "r", "severity": "critical", "app": "ünï\x00cödé\xff"}, "5c13ee7cb1de1eef"},
	{map[string]string{}, "cbf29ce484222325"},
}

// fnvFingerprint is the fingerprint code of servescope before it used prometheus/common.
func fnvFingerprint(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := fnv.New64a()
	for _, k := range keys {
		_, _ = h.Write([]byte(k))
		_, _ = h.Write([]byte{0xff})
		_, _ = h.Write([]byte(labels[k]))
		_, _ = h.Write([]byte{0xff})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

func TestFingerprintMatchesStoredValues(t *testing.T) {
	for _, c := range storedFingerprints {
		if got := Fingerprint(c.labels); got != c.want {
			t.Errorf("Fingerprint(%q) = %s, want %s (the value stored by earlier versions)", c.labels, got, c.want)
		}
		if got := fnvFingerprint(c.labels); got != c.want {
			t.Errorf("fnvFingerprint(%q) = %s, want %s: the pinned value is wrong", c.labels, got, c.want)
		}
	}
}

// FuzzFingerprintMatchesStoredValues holds prometheus/common's fingerprint to the earlier code on
// arbitrary label sets of up to three labels (names and values of any bytes, duplicates merged).
func FuzzFingerprintMatchesStoredValues(f *testing.F) {
	f.Add("alertname", "server_errors", "severity", "critical", "engine", "vllm-0")
	f.Add("a", "1b", "", "2", "a", "12")
	f.Add("\xff", "", "x\xffy", "\x00", "ü", "\xff\xff")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		labels := map[string]string{k1: v1, k2: v2, k3: v3}
		if got, want := Fingerprint(labels), fnvFingerprint(labels); got != want {
			t.Fatalf("Fingerprint(%q) = %s, earlier code %s", labels, got, want)
		}
	})
}
