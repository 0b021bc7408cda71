// Package collector wires servescope's engine-side collector: the /metrics scraper, the OTLP
// traces receiver (gRPC and HTTP) and the log followers, all publishing through one Publisher,
// plus the collector's own /metrics, /healthz and /readyz. Tests and the binary start it the same
// way:
//
//	c, err := collector.New(cfg, pub, log, prometheus.NewRegistry())
//	err = c.Run(ctx)
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/collector/apptrace"
	"github.com/servescope/servescope/services/collector/logship"
	"github.com/servescope/servescope/services/collector/otlp"
	"github.com/servescope/servescope/services/collector/scrape"
)

// Publisher takes events for delivery; schema/publish's Publisher is one.
type Publisher interface {
	Publish(schema.Event) error
}

// Off is the address value that turns a listener off.
const Off = "off"

// Config is the collector's configuration, read from the environment by config.Load.
type Config struct {
	// NATS is the shared NATS settings (SERVESCOPE_NATS_*).
	NATS config.NATS
	// Targets are the engines' /metrics URLs, comma-separated; an entry "name=URL" names the
	// engine, otherwise the URL is its name.
	Targets []string `env:"COLLECTOR_TARGETS" envSeparator:","`
	// ScrapeInterval is the time between two scrapes of a target (0.1 s or more).
	ScrapeInterval time.Duration `env:"COLLECTOR_SCRAPE_INTERVAL" envDefault:"1s"`
	// ScrapeTimeout bounds one scrape; 0 means the interval, at least 1 s.
	ScrapeTimeout time.Duration `env:"COLLECTOR_SCRAPE_TIMEOUT"`
	// OTLPGRPCAddr is the OTLP/gRPC traces listener (host:port, or "off").
	OTLPGRPCAddr string `env:"COLLECTOR_OTLP_GRPC_ADDR" envDefault:":4317"`
	// OTLPHTTPAddr is the OTLP/HTTP traces listener serving POST /v1/traces (host:port, or "off").
	OTLPHTTPAddr string `env:"COLLECTOR_OTLP_HTTP_ADDR" envDefault:":4318"`
	// LogFiles are vLLM log files to follow, comma-separated; an entry "name=PATH" names the
	// engine of that log.
	LogFiles []string `env:"COLLECTOR_LOG_FILES" envSeparator:","`
	// Engine names the engine of logs without a name and of spans (SpanNaming; docs/architecture.md,
	// "The engine of a span"); default: the name of the only target, or "vllm".
	Engine string `env:"COLLECTOR_ENGINE"`
	// LogTimezone is the IANA time zone of vLLM's log timestamps (vLLM writes local time).
	LogTimezone string `env:"COLLECTOR_LOG_TIMEZONE" envDefault:"UTC"`
	// LogPollInterval is how often followed files are checked for new data and rotation.
	LogPollInterval time.Duration `env:"COLLECTOR_LOG_POLL_INTERVAL" envDefault:"250ms"`
	// LogRotateWait is how long a followed file renamed away by a rotation is still read, for
	// the lines its writer appends before it reopens the path (Fluent Bit's Rotate_Wait). Make it
	// longer than the writer's reopen delay: lines written to the old file later are not read,
	// nor, after a collector restart within the wait, the rest of the old file.
	LogRotateWait time.Duration `env:"COLLECTOR_LOG_ROTATE_WAIT" envDefault:"5s"`
	// MetricsAddr serves the collector's own /metrics, /healthz and /readyz (host:port, or "off").
	MetricsAddr string `env:"COLLECTOR_METRICS_ADDR" envDefault:":9103"`
	// StateDir holds the log offsets file (log-offsets.json), saved every second, so a restart
	// resends no line (a crash resends up to a second of them). One directory per collector.
	StateDir string `env:"COLLECTOR_STATE_DIR" envDefault:"/var/lib/servescope/collector"`
	// SpoolDir is the publisher's on-disk spool for events NATS has not acknowledged.
	SpoolDir string `env:"COLLECTOR_SPOOL_DIR" envDefault:"/var/lib/servescope/collector-spool"`
	// SpoolMaxBytes caps the spool; events beyond it are dropped, counted and logged as errors.
	SpoolMaxBytes int64 `env:"COLLECTOR_SPOOL_MAX_BYTES" envDefault:"1073741824"`
	// SpoolFsync is the spool's sync policy: always, interval (every second) or never.
	SpoolFsync string `env:"COLLECTOR_SPOOL_FSYNC" envDefault:"interval"`
	// ShutdownTimeout bounds the flush of queued events at exit.
	ShutdownTimeout time.Duration `env:"COLLECTOR_SHUTDOWN_TIMEOUT" envDefault:"10s"`

	// Lease makes each engine's scrapes the job of one collector at a time among those sharing
	// the lease bucket the setup step made on NATS: the holder of the engine's lease
	// (key scrape.<engine>-<hash> in the bucket SERVESCOPE_LEASES) scrapes it, the others stand by and take over within about 1¼ ×
	// SERVESCOPE_LEASE_TTL of its death. Spans and logs are not affected (each arrives at one
	// collector anyway).
	Lease bool `env:"COLLECTOR_LEASE"`
	// Instance names this collector as a lease holder (default: host name and process id).
	Instance string `env:"COLLECTOR_INSTANCE"`

	// AppSpans turns applications' spans (OpenTelemetry GenAI, OpenInference, OpenLLMetry)
	// received on the OTLP listeners into app.records (package apptrace, docs/otel-app-spans.md);
	// false ignores them.
	AppSpans bool `env:"COLLECTOR_APP_SPANS" envDefault:"true"`
	// AppMaxTraces bounds the application traces waiting for their root; when a bound of the
	// waiting traces is reached, the oldest is published early.
	AppMaxTraces int `env:"COLLECTOR_APP_MAX_TRACES" envDefault:"10000"`
	// AppMaxSpansPerTrace bounds the spans kept per application trace.
	AppMaxSpansPerTrace int `env:"COLLECTOR_APP_MAX_SPANS_PER_TRACE" envDefault:"512"`
	// AppMaxBytes bounds the facts kept for all waiting application traces (at least 2 MiB).
	AppMaxBytes int64 `env:"COLLECTOR_APP_MAX_BYTES" envDefault:"67108864"`
	// AppTraceWait is how long an application trace waits for its root span before its record is
	// published.
	AppTraceWait time.Duration `env:"COLLECTOR_APP_TRACE_WAIT" envDefault:"30s"`
}

// Validate implements config.Validator.
func (c *Config) Validate() error {
	var errs []error
	if c.ScrapeInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("COLLECTOR_SCRAPE_INTERVAL: must be at least 100ms, got %s", c.ScrapeInterval))
	}
	if c.ScrapeTimeout < 0 {
		errs = append(errs, fmt.Errorf("COLLECTOR_SCRAPE_TIMEOUT: must not be negative, got %s", c.ScrapeTimeout))
	}
	if _, err := scrape.ParseTargets(c.Targets); err != nil {
		errs = append(errs, fmt.Errorf("COLLECTOR_TARGETS: %w", err))
	}
	if _, err := time.LoadLocation(c.LogTimezone); err != nil {
		errs = append(errs, fmt.Errorf("COLLECTOR_LOG_TIMEZONE: %w", err))
	}
	if c.LogPollInterval <= 0 {
		errs = append(errs, fmt.Errorf("COLLECTOR_LOG_POLL_INTERVAL: must be positive, got %s", c.LogPollInterval))
	}
	if c.LogRotateWait <= 0 {
		errs = append(errs, fmt.Errorf("COLLECTOR_LOG_ROTATE_WAIT: must be positive, got %s", c.LogRotateWait))
	}
	switch c.SpoolFsync {
	case "always", "interval", "never":
	default:
		errs = append(errs, fmt.Errorf("COLLECTOR_SPOOL_FSYNC: want always, interval or never, got %q", c.SpoolFsync))
	}
	if c.AppSpans {
		if c.AppMaxTraces <= 0 {
			errs = append(errs, fmt.Errorf("COLLECTOR_APP_MAX_TRACES: must be positive, got %d", c.AppMaxTraces))
		}
		if c.AppMaxSpansPerTrace <= 0 {
			errs = append(errs, fmt.Errorf("COLLECTOR_APP_MAX_SPANS_PER_TRACE: must be positive, got %d", c.AppMaxSpansPerTrace))
		}
		if c.AppMaxBytes < 2*apptrace.MaxTraceBytes {
			errs = append(errs, fmt.Errorf("COLLECTOR_APP_MAX_BYTES: must be at least %d (two traces' worth), got %d", 2*apptrace.MaxTraceBytes, c.AppMaxBytes))
		}
		if c.AppTraceWait <= 0 {
			errs = append(errs, fmt.Errorf("COLLECTOR_APP_TRACE_WAIT: must be positive, got %s", c.AppTraceWait))
		}
	}
	return errors.Join(errs...)
}

// PublisherConfig is the configuration of the collector's publisher: its spool (COLLECTOR_SPOOL_*),
// and the check at start that the events stream takes engine.sample, engine.span and engine.log,
// with the stream's limits compared to SERVESCOPE_STREAM_* (see publish.Config.Kinds). log and
// reg become the publisher's Logger and Registerer.
func (c *Config) PublisherConfig(log *slog.Logger, reg prometheus.Registerer) publish.Config {
	expected, _ := c.NATS.Topology().Expected(c.NATS.StreamSettings())
	kinds := []schema.Kind{schema.KindEngineSample, schema.KindEngineSpan, schema.KindEngineLog}
	if c.AppSpans {
		kinds = append(kinds, schema.KindAppRecord) // applications' spans become app.records
	}
	return publish.Config{
		SpoolDir:      c.SpoolDir,
		SpoolMaxBytes: c.SpoolMaxBytes,
		Fsync:         publish.FsyncPolicy(c.SpoolFsync),
		Kinds:         kinds,
		Expect:        expected,
		SetupWait:     c.NATS.SetupWait,
		Logger:        log,
		Registerer:    reg,
	}
}

// SpanNaming is how the OTLP receiver names the engine of a span: the configured engine names
// (COLLECTOR_ENGINE, the names of COLLECTOR_TARGETS and COLLECTOR_LOG_FILES), of which the span's
// service.name may pick one; otherwise EngineName (see otlp.Naming for the whole rule).
func (c *Config) SpanNaming() otlp.Naming {
	n := otlp.Naming{Default: c.EngineName()}
	add := func(name string) {
		if name != "" && !slices.Contains(n.Configured, name) {
			n.Configured = append(n.Configured, name)
		}
	}
	add(c.Engine)
	if ts, err := scrape.ParseTargets(c.Targets); err == nil {
		for _, t := range ts {
			if t.Engine != "" {
				add(t.Engine)
			} else {
				add(t.URL)
			}
		}
	}
	for _, lf := range ParseLogFiles(c.LogFiles, c.EngineName()) {
		add(lf.Engine)
	}
	return n
}

// EngineName is the engine name of logs without a name and the default of spans (see
// SpanNaming).
func (c *Config) EngineName() string {
	if c.Engine != "" {
		return c.Engine
	}
	if ts, err := scrape.ParseTargets(c.Targets); err == nil && len(ts) == 1 {
		if ts[0].Engine != "" {
			return ts[0].Engine
		}
		return ts[0].URL
	}
	return "vllm"
}

// LogFile is one entry of COLLECTOR_LOG_FILES.
type LogFile struct {
	Engine, Path string
}

// ParseLogFiles reads COLLECTOR_LOG_FILES entries ("PATH" or "name=PATH"); engine names the
// entries without a name.
func ParseLogFiles(list []string, engine string) []LogFile {
	var out []LogFile
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		lf := LogFile{Engine: engine, Path: raw}
		if name, path, ok := strings.Cut(raw, "="); ok && name != "" && !strings.Contains(name, "/") {
			lf = LogFile{Engine: name, Path: path}
		}
		out = append(out, lf)
	}
	return out
}

// Collector runs the scraper, the OTLP receiver and the log followers.
type Collector struct {
	cfg      Config
	pub      Publisher
	log      *slog.Logger
	reg      *prometheus.Registry
	loc      *time.Location
	scraper  *scrape.Scraper
	receiver *otlp.Receiver
	apps     *apptrace.Assembler
	logs     *logship.Metrics
	state    *logship.State
	ready    *service.Readiness
	targets  int

	grpcLn, httpLn, metricsLn net.Listener
}

// New builds a collector and opens its listeners (so their addresses are known before Run; a
// port 0 picks a free port). reg gets the collector's metrics and is served on /metrics.
func New(cfg Config, pub Publisher, log *slog.Logger, reg *prometheus.Registry) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	loc, _ := time.LoadLocation(cfg.LogTimezone)
	c := &Collector{cfg: cfg, pub: pub, log: log, reg: reg, loc: loc, ready: service.NewReadiness()}
	targets, _ := scrape.ParseTargets(cfg.Targets)
	c.targets = len(targets)
	var err error
	c.scraper, err = scrape.New(targets, pub, scrape.Config{
		Interval: cfg.ScrapeInterval, Timeout: cfg.ScrapeTimeout,
		Logger: log.With("component", "scrape"), Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	var opts []otlp.Option
	if cfg.AppSpans {
		c.apps, err = apptrace.NewAssembler(apptrace.Config{
			MaxTraces: cfg.AppMaxTraces, MaxSpansPerTrace: cfg.AppMaxSpansPerTrace,
			MaxBytes: cfg.AppMaxBytes, MaxWait: cfg.AppTraceWait,
		}, pub, log.With("component", "apptrace"), reg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlp.WithAppSpans(c.apps))
	}
	c.receiver, err = otlp.NewReceiver(pub, cfg.SpanNaming(), log.With("component", "otlp"), reg, opts...)
	if err != nil {
		return nil, err
	}
	c.logs, err = logship.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	if len(cfg.LogFiles) > 0 {
		c.state, err = logship.OpenState(filepath.Join(cfg.StateDir, "log-offsets.json"))
		if err != nil {
			return nil, err
		}
	}
	for _, l := range []struct {
		addr string
		dst  *net.Listener
		what string
	}{
		{cfg.OTLPGRPCAddr, &c.grpcLn, "OTLP gRPC"},
		{cfg.OTLPHTTPAddr, &c.httpLn, "OTLP HTTP"},
		{cfg.MetricsAddr, &c.metricsLn, "metrics"},
	} {
		if l.addr == Off || l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			c.closeListeners()
			return nil, fmt.Errorf("listen for %s on %s: %w", l.what, l.addr, err)
		}
		*l.dst = ln
	}
	return c, nil
}

func (c *Collector) closeListeners() {
	for _, ln := range []net.Listener{c.grpcLn, c.httpLn, c.metricsLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

func addr(ln net.Listener) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// OTLPGRPCAddr, OTLPHTTPAddr and MetricsAddr are the listeners' addresses ("" when off).
func (c *Collector) OTLPGRPCAddr() string { return addr(c.grpcLn) }
func (c *Collector) OTLPHTTPAddr() string { return addr(c.httpLn) }
func (c *Collector) MetricsAddr() string  { return addr(c.metricsLn) }

// Readiness is the collector's /readyz: starting until Run runs, then ready, stopping once Run's
// context ended. Nothing it depends on decides it: it takes spans whether NATS is there or not
// (they wait in the spool), so taking it out of rotation during an outage would lose the spans
// the spool would have kept. The binary adds the publisher's state as details.
func (c *Collector) Readiness() *service.Readiness { return c.ready }

// Run collects until ctx ends or a part fails, and returns the first failure. Its parts (the
// scrapes, the OTLP receivers, the log followers and the HTTP endpoints) stop together.
func (c *Collector) Run(ctx context.Context) error {
	g := service.NewGroup(c.log)
	g.AddStop("readiness", c.ready.Stopping)
	if c.targets > 0 {
		// A part that returns stops the group: the scraper returns at once without targets.
		g.AddContext("scrape", c.scraper.Run)
	}
	if c.grpcLn != nil {
		g.AddContext("otlp grpc", func(ctx context.Context) error { return c.receiver.ServeGRPC(ctx, c.grpcLn) })
	}
	if c.httpLn != nil {
		g.AddContext("otlp http", func(ctx context.Context) error { return c.receiver.ServeHTTPOn(ctx, c.httpLn) })
	}
	if c.apps != nil {
		// Added after the OTLP servers, so it stops after them: its closing flush publishes the
		// traces their last exports started, before the caller closes the publisher.
		g.AddContext("app traces", c.apps.Run)
	}
	for _, lf := range ParseLogFiles(c.cfg.LogFiles, c.cfg.EngineName()) {
		sh := logship.NewShipper(c.pub, lf.Engine, lf.Path, c.loc, nil, c.logs, c.log.With("component", "logship"))
		fl := &logship.Follower{Path: lf.Path, State: c.state, Poll: c.cfg.LogPollInterval, RotateWait: c.cfg.LogRotateWait}
		g.AddContext("log "+lf.Path, func(ctx context.Context) error { return sh.Follow(ctx, fl) })
	}
	if c.metricsLn != nil {
		srv := &http.Server{Handler: service.NewMux(c.reg, c.ready), ReadHeaderTimeout: 10 * time.Second}
		g.AddServer("metrics", srv, c.metricsLn, 5*time.Second)
	}
	c.ready.Started()
	c.log.Info("collector running",
		"targets", len(c.cfg.Targets), "scrape_interval", c.cfg.ScrapeInterval.String(),
		"otlp_grpc", c.OTLPGRPCAddr(), "otlp_http", c.OTLPHTTPAddr(), "metrics", c.MetricsAddr(),
		"log_files", len(c.cfg.LogFiles), "app_spans", c.cfg.AppSpans)
	return g.Run(ctx)
}
