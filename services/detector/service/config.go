// Package service assembles the detector: settings, built-in and user rules, evaluation groups,
// the webhook notifier, alert state persistence, replay, and the running service with its
// /metrics, /healthz and /readyz (Serve).
package service

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/servescope/servescope/internal/config"
)

// Config is the detector's environment.
type Config struct {
	// ClickHouse is where the landing tables and the alerts table live.
	ClickHouse config.ClickHouse
	// WebhookURLs receive every alert (Alertmanager webhook v4); two of them must differ in more
	// than credentials or query.
	WebhookURLs []string `env:"DETECTOR_WEBHOOK_URLS" envSeparator:","`
	// WebhookSecret, when set, signs bodies: X-Servescope-Signature: sha256=<hex HMAC-SHA256>.
	WebhookSecret string `env:"DETECTOR_WEBHOOK_SECRET"`
	// WebhookSecretFile is read for the secret instead (Docker/Kubernetes secrets).
	WebhookSecretFile string `env:"DETECTOR_WEBHOOK_SECRET_FILE"`
	// AlertmanagerURLs are Alertmanagers' base URLs (http://alertmanager:9093): every firing
	// alert is POSTed to each one's /api/v2/alerts at every evaluation, and each resolution for
	// 15 minutes after it, as Prometheus does. They can be set with or without WebhookURLs.
	AlertmanagerURLs []string `env:"DETECTOR_ALERTMANAGER_URLS" envSeparator:","`
	// AlertmanagerTimeout bounds one POST to an Alertmanager.
	AlertmanagerTimeout time.Duration `env:"DETECTOR_ALERTMANAGER_TIMEOUT" envDefault:"10s"`
	// RulesDir holds extra rule files (*.yaml); a rule named like a built-in one replaces it
	// (`servescope rules check` says so). They are reloaded when a file changes and on SIGHUP.
	RulesDir string `env:"DETECTOR_RULES_DIR"`
	// SLOsDir holds SLO files (*.yaml, services/detector/slo); an SLO named like a built-in one
	// replaces it. Each SLO's burn-rate rules run with the others, and its objectives are written
	// into slo_objectives at start and at every reload.
	SLOsDir string `env:"DETECTOR_SLOS_DIR"`
	// EnginesFile is the engines file (services/detector/slo, Engines): prices per engine-hour
	// and slot limits, written into engine_config at start and at every reload.
	EnginesFile string `env:"DETECTOR_ENGINES_FILE"`
	// Interval is the evaluation interval of rules that do not set their own.
	Interval time.Duration `env:"DETECTOR_INTERVAL" envDefault:"30s"`
	// MetricsAddr serves /metrics, /healthz and /readyz (ready: ClickHouse answering, the alert
	// state restored).
	MetricsAddr string `env:"DETECTOR_METRICS_ADDR" envDefault:":9102"`
	// RepeatInterval is how often a still-firing alert is sent again.
	RepeatInterval time.Duration `env:"DETECTOR_REPEAT_INTERVAL" envDefault:"4h"`
	// EvalDelay evaluates that far behind the wall clock, so events still in the pipeline
	// (gateway → NATS → consumer batch) are in the tables when a window is read.
	EvalDelay time.Duration `env:"DETECTOR_EVAL_DELAY" envDefault:"10s"`
	// RuleConcurrency is how many rules of one evaluation group (the rules sharing an interval)
	// run their queries at once; 1 evaluates them one after the other. Results are saved and sent
	// in rule order. servescope_detector_group_last_duration_seconds and
	// servescope_detector_group_iterations_missed_total (per interval) show a detector falling
	// behind: a missed tick delays every alert by an interval.
	RuleConcurrency int `env:"DETECTOR_RULE_CONCURRENCY" envDefault:"4"`
	// DiagnoseWarmInterval is how often the detector computes into diagnose_hourly
	// (migration 000017) the hours of `servescope diagnose`'s default baseline that are missing
	// or outdated, so that a diagnose merges a day's baseline instead of reading it
	// (internal/diagnose, Warm): the last 49 h, all models together, hours of 100,000 requests or
	// more. 0 turns it off. servescope_detector_diagnose_hours_computed_total and
	// servescope_detector_diagnose_warm_failures_total count its work.
	DiagnoseWarmInterval time.Duration `env:"DETECTOR_DIAGNOSE_WARM_INTERVAL" envDefault:"5m"`
	// ExternalURL is where the detector is reachable, sent as the webhook messages' externalURL
	// and as the base of the alerts' generatorURL (ExternalURL/rules#<rule>).
	ExternalURL string `env:"DETECTOR_EXTERNAL_URL"`
	// Lease makes this detector one of several with the same settings of which one at a time
	// works: the holder of the lease DETECTOR_LEASE_KEY in the bucket the setup step made on NATS
	// (SERVESCOPE_NATS_*, SERVESCOPE_SUBJECT_PREFIX) evaluates, keeps the alerts table and sends;
	// the others stand by and take over within about 1¼ × SERVESCOPE_LEASE_TTL of its death
	// (package internal/lease). Needed with webhook receivers, which would otherwise get every
	// notification from each detector; detectors that send only to Alertmanager can all run
	// without it (Alertmanager de-duplicates).
	Lease bool `env:"DETECTOR_LEASE"`
	// LeaseKey is the lease's key: detectors sharing it are one group.
	LeaseKey string `env:"DETECTOR_LEASE_KEY" envDefault:"detector"`
	// Instance names this detector as a lease holder (default: host name and process id).
	Instance string `env:"DETECTOR_INSTANCE"`
	// NATS is where the lease bucket lives (read only with Lease).
	NATS config.NATS
}

// Validate checks the detector's own settings.
func (c *Config) Validate() error {
	var errs []error
	if c.Interval < time.Second {
		errs = append(errs, fmt.Errorf("DETECTOR_INTERVAL: must be at least 1s, got %s", c.Interval))
	}
	if c.RuleConcurrency < 1 {
		errs = append(errs, fmt.Errorf("DETECTOR_RULE_CONCURRENCY: must be at least 1, got %d", c.RuleConcurrency))
	}
	if c.RepeatInterval < 0 || c.EvalDelay < 0 || c.DiagnoseWarmInterval < 0 {
		errs = append(errs, errors.New("DETECTOR_REPEAT_INTERVAL, DETECTOR_EVAL_DELAY and DETECTOR_DIAGNOSE_WARM_INTERVAL: must not be negative"))
	}
	for _, u := range c.WebhookURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			errs = append(errs, fmt.Errorf("DETECTOR_WEBHOOK_URLS: %q is not an http(s) URL", redactedHost(u)))
		}
	}
	for _, u := range c.AlertmanagerURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			errs = append(errs, fmt.Errorf("DETECTOR_ALERTMANAGER_URLS: %q is not an http(s) URL", redactedHost(u)))
		}
	}
	if c.Lease && !leaseKeyRE.MatchString(c.LeaseKey) {
		errs = append(errs, fmt.Errorf("DETECTOR_LEASE_KEY: %q must be letters, digits, '-', '_', '=' or '.' (a NATS key)", c.LeaseKey))
	}
	if c.AlertmanagerTimeout <= 0 {
		errs = append(errs, fmt.Errorf("DETECTOR_ALERTMANAGER_TIMEOUT: must be positive, got %s", c.AlertmanagerTimeout))
	}
	return errors.Join(errs...)
}

// leaseKeyRE is what nats.go accepts as a key-value key.
var leaseKeyRE = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func redactedHost(u string) string {
	if i := strings.IndexAny(u, "?@"); i >= 0 {
		return u[:i] + "…"
	}
	return u
}

// Secret returns the webhook secret, from the file when one is named.
func (c *Config) Secret() ([]byte, error) {
	if c.WebhookSecretFile == "" {
		return []byte(c.WebhookSecret), nil
	}
	b, err := os.ReadFile(c.WebhookSecretFile)
	if err != nil {
		return nil, fmt.Errorf("DETECTOR_WEBHOOK_SECRET_FILE: %w", err)
	}
	return []byte(strings.TrimSpace(string(b))), nil
}
