// Package server wires the gateway: configuration, the NATS connection and publisher, the proxy,
// the record ingest endpoint, its own /metrics, /healthz and /readyz, and graceful shutdown.
package server

import (
	"fmt"
	"time"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/gateway/proxy"
)

// Config is the gateway's configuration, read from the environment by config.Load.
type Config struct {
	// ListenAddr is where the gateway listens (host:port).
	ListenAddr string `env:"GATEWAY_LISTEN_ADDR" envDefault:":8080"`
	// UpstreamURL is one or more comma-separated engine base URLs.
	UpstreamURL string `env:"GATEWAY_UPSTREAM_URL" envDefault:"http://127.0.0.1:8000"`
	// UpstreamPolicy balances requests across engines: least_in_flight or round_robin.
	UpstreamPolicy string `env:"GATEWAY_UPSTREAM_POLICY" envDefault:"least_in_flight"`
	// UpstreamDialTimeout bounds connecting to an engine.
	UpstreamDialTimeout time.Duration `env:"GATEWAY_UPSTREAM_DIAL_TIMEOUT" envDefault:"5s"`
	// UpstreamHeaderTimeout bounds the wait for an engine's response headers; for a
	// non-streaming completion that is the whole generation.
	UpstreamHeaderTimeout time.Duration `env:"GATEWAY_UPSTREAM_HEADER_TIMEOUT" envDefault:"10m"`
	// MaxBodyBytes bounds request bodies (413 above).
	MaxBodyBytes int64 `env:"GATEWAY_MAX_BODY_BYTES" envDefault:"33554432"`
	// ReadHeaderTimeout bounds reading a client's request headers.
	ReadHeaderTimeout time.Duration `env:"GATEWAY_READ_HEADER_TIMEOUT" envDefault:"10s"`
	// ShutdownTimeout bounds the drain of in-flight requests at shutdown; the publisher's flush
	// gets the same again.
	ShutdownTimeout time.Duration `env:"GATEWAY_SHUTDOWN_TIMEOUT" envDefault:"30s"`

	// SpoolDir holds the publisher's on-disk spool: events NATS has not acknowledged wait there
	// while NATS is away, and are replayed in order.
	SpoolDir string `env:"GATEWAY_SPOOL_DIR" envDefault:"/var/lib/servescope/gateway-spool"`
	// SpoolMaxBytes caps the spool; events beyond it are dropped, counted and logged as errors.
	SpoolMaxBytes int64 `env:"GATEWAY_SPOOL_MAX_BYTES" envDefault:"1073741824"`
	// SpoolFsync is the spool's sync policy: always, interval (every second) or never.
	SpoolFsync string `env:"GATEWAY_SPOOL_FSYNC" envDefault:"interval"`
	// PublishLinger is how long the recorder and the publisher wait to gather events before
	// encoding and sending them together; it saves CPU per request at the cost of that much
	// delay before events reach NATS.
	PublishLinger time.Duration `env:"GATEWAY_PUBLISH_LINGER" envDefault:"5ms"`
	// PublishQueueSize bounds the in-memory event queue; a full queue spills to the spool.
	PublishQueueSize int `env:"GATEWAY_PUBLISH_QUEUE_SIZE" envDefault:"8192"`

	// CaptureContent stores prompt and output text in request.finished.
	CaptureContent bool `env:"GATEWAY_CAPTURE_CONTENT" envDefault:"false"`
	// CaptureMaxBytes bounds each stored text, after redaction.
	CaptureMaxBytes int `env:"GATEWAY_CAPTURE_MAX_BYTES" envDefault:"4096"`
	// CaptureRedact lists redaction regular expressions (RE2), one per line; matches are
	// replaced by [REDACTED] before truncation. One pattern with alternation works as well.
	CaptureRedact []string `env:"GATEWAY_CAPTURE_REDACT" envSeparator:"\n"`
	// AskUsage asks the engine for the final usage chunk of streams whose client did not, and
	// removes that chunk from the client's stream. Set it to false when the engines run vLLM with
	// --enable-force-include-usage: they send that chunk to every client, so removing it would
	// change the answer (and it is not needed for exact tokens).
	AskUsage bool `env:"GATEWAY_ASK_USAGE" envDefault:"true"`
	// EnginePromptTokensDetails says every engine runs vLLM with --enable-prompt-tokens-details.
	// vLLM then leaves usage.prompt_tokens_details out exactly when no prompt token came from the
	// prefix cache, so the gateway records cached_tokens 0 for it; otherwise that stays unknown.
	EnginePromptTokensDetails bool `env:"GATEWAY_ENGINE_PROMPT_TOKENS_DETAILS" envDefault:"false"`
	// AllowedScripts lists the Unicode scripts generated text may use (Common and Inherited are
	// always allowed), comma-separated, e.g. "Latin,Cyrillic".
	AllowedScripts []string `env:"GATEWAY_ALLOWED_SCRIPTS" envDefault:"Latin" envSeparator:","`

	// IngestToken is the bearer token of POST /servescope/v1/records; empty disables the
	// endpoint (404).
	IngestToken     string `env:"SERVESCOPE_INGEST_TOKEN"`
	IngestTokenFile string `env:"SERVESCOPE_INGEST_TOKEN_FILE"`
	// IngestMaxBytes bounds an ingest request body.
	IngestMaxBytes int64 `env:"GATEWAY_INGEST_MAX_BYTES" envDefault:"4194304"`

	// GatewayName names this instance in records; default the host name.
	GatewayName string `env:"GATEWAY_NAME"`

	// NATS is the shared NATS settings (SERVESCOPE_NATS_*).
	NATS config.NATS
}

// Validate implements config.Validator.
func (c *Config) Validate() error {
	if _, err := proxy.ParseUpstreams(c.UpstreamURL); err != nil {
		return fmt.Errorf("GATEWAY_UPSTREAM_URL: %w", err)
	}
	switch c.UpstreamPolicy {
	case proxy.PolicyLeastInFlight, proxy.PolicyRoundRobin:
	default:
		return fmt.Errorf("GATEWAY_UPSTREAM_POLICY: %q, want least_in_flight or round_robin", c.UpstreamPolicy)
	}
	switch publish.FsyncPolicy(c.SpoolFsync) {
	case publish.FsyncAlways, publish.FsyncInterval, publish.FsyncNever:
	default:
		return fmt.Errorf("GATEWAY_SPOOL_FSYNC: %q, want always, interval or never", c.SpoolFsync)
	}
	if c.SpoolDir == "" {
		return fmt.Errorf("GATEWAY_SPOOL_DIR: must be set")
	}
	if c.MaxBodyBytes <= 0 || c.IngestMaxBytes <= 0 || c.SpoolMaxBytes <= 0 {
		return fmt.Errorf("GATEWAY_MAX_BODY_BYTES, GATEWAY_INGEST_MAX_BYTES and GATEWAY_SPOOL_MAX_BYTES must be positive")
	}
	if c.CaptureMaxBytes <= 0 || c.CaptureMaxBytes > schema.MaxContentBytes {
		return fmt.Errorf("GATEWAY_CAPTURE_MAX_BYTES: %d, must be between 1 and %d", c.CaptureMaxBytes, schema.MaxContentBytes)
	}
	if c.UpstreamDialTimeout <= 0 || c.UpstreamHeaderTimeout <= 0 || c.ShutdownTimeout <= 0 {
		return fmt.Errorf("GATEWAY_UPSTREAM_DIAL_TIMEOUT, GATEWAY_UPSTREAM_HEADER_TIMEOUT and GATEWAY_SHUTDOWN_TIMEOUT must be positive")
	}
	return nil
}

// publishedKinds are the kinds the gateway publishes: request.started and request.finished,
// and app.record when the ingest endpoint is on.
func (c *Config) publishedKinds() []schema.Kind {
	kinds := []schema.Kind{schema.KindRequestStarted, schema.KindRequestFinished}
	if c.IngestToken != "" {
		kinds = append(kinds, schema.KindAppRecord)
	}
	return kinds
}
