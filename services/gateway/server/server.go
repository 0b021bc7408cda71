package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/schema"
	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/gateway/ingest"
	"github.com/servescope/servescope/services/gateway/proxy"
	"github.com/servescope/servescope/services/gateway/record"
)

// Server is a running gateway.
type Server struct {
	cfg   Config
	log   *slog.Logger
	nc    *nats.Conn
	pub   *publish.Publisher
	proxy *proxy.Handler
	ln    net.Listener
	http  *http.Server
	ready *service.Readiness

	engines      []*url.URL
	engineHealth *http.Client
	// engineSeen is set once an engine answered GET /health: from then on /readyz no longer asks.
	engineSeen atomic.Bool
}

// New builds the gateway and binds its listener. It does not wait for NATS: the connection
// retries in the background and events go to the spool until it succeeds.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.GatewayName == "" {
		cfg.GatewayName, _ = os.Hostname()
	}
	if cfg.GatewayName == "" {
		// Heartbeats need a name to be told apart; a host without one is "gateway".
		cfg.GatewayName = "gateway"
	}
	if cfg.IngestTokenFile != "" {
		b, err := os.ReadFile(cfg.IngestTokenFile)
		if err != nil {
			return nil, fmt.Errorf("SERVESCOPE_INGEST_TOKEN_FILE: %w", err)
		}
		cfg.IngestToken = strings.TrimRight(string(b), "\r\n")
	}
	engines, err := proxy.ParseUpstreams(cfg.UpstreamURL)
	if err != nil {
		return nil, fmt.Errorf("GATEWAY_UPSTREAM_URL: %w", err)
	}
	s := &Server{cfg: cfg, log: log, ready: service.NewReadiness(), engines: engines,
		engineHealth: &http.Client{Transport: proxy.NewTransport(cfg.UpstreamDialTimeout, service.CheckTimeout), Timeout: service.CheckTimeout}}

	nc, err := cfg.NATS.Connect("servescope-gateway", append(config.NATSEventHandlers(log, config.RedactURL(cfg.NATS.URL)),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// Fail publishes at once while disconnected: they go to the spool instead of waiting in
		// the connection's buffer for an acknowledgement that cannot come.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: the connection was closed on purpose
				log.Warn("NATS disconnected; spooling events", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", c.ConnectedUrlRedacted())
		}),
	)...)
	if err != nil {
		return nil, err
	}
	s.nc = nc

	reg := service.NewRegistry("gateway")
	expected, _ := cfg.NATS.Topology().Expected(cfg.NATS.StreamSettings())
	s.pub, err = publish.New(nc, cfg.NATS.SubjectPrefix, publish.Config{
		SpoolDir:      cfg.SpoolDir,
		SpoolMaxBytes: cfg.SpoolMaxBytes,
		Fsync:         publish.FsyncPolicy(cfg.SpoolFsync),
		QueueSize:     cfg.PublishQueueSize,
		Linger:        cfg.PublishLinger,
		Kinds:         cfg.publishedKinds(),
		Expect:        expected,
		SetupWait:     cfg.NATS.SetupWait,
		Logger:        log.With("component", "publish"),
		Registerer:    reg,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	handler, err := s.buildHandler(reg)
	if err != nil {
		s.closeBackground()
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		s.closeBackground()
		return nil, fmt.Errorf("listen on %s: %w", cfg.ListenAddr, err)
	}
	s.ln = ln
	s.http = &http.Server{Handler: handler, ReadHeaderTimeout: cfg.ReadHeaderTimeout, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	return s, nil
}

func (s *Server) buildHandler(reg *prometheus.Registry) (http.Handler, error) {
	cfg := s.cfg
	ups, err := proxy.ParseUpstreams(cfg.UpstreamURL)
	if err != nil {
		return nil, err
	}
	script, err := record.NewScriptCheck(cfg.AllowedScripts)
	if err != nil {
		return nil, fmt.Errorf("GATEWAY_ALLOWED_SCRIPTS: %w", err)
	}
	var capture *record.Capture
	if cfg.CaptureContent {
		if capture, err = record.NewCapture(cfg.CaptureRedact, cfg.CaptureMaxBytes); err != nil {
			return nil, fmt.Errorf("GATEWAY_CAPTURE_REDACT: %w", err)
		}
	}
	metrics, err := proxy.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	p, err := proxy.New(proxy.Options{
		Upstreams: ups, Policy: cfg.UpstreamPolicy,
		Transport: proxy.NewTransport(cfg.UpstreamDialTimeout, cfg.UpstreamHeaderTimeout),
		Publisher: s.pub, Script: script, Capture: capture,
		AskUsage: cfg.AskUsage, PromptTokensDetails: cfg.EnginePromptTokensDetails,
		MaxBodyBytes: cfg.MaxBodyBytes, Gateway: cfg.GatewayName,
		Metrics: metrics, Logger: s.log.With("component", "proxy"), RecordLinger: cfg.PublishLinger,
	})
	if err != nil {
		return nil, err
	}
	s.proxy = p
	ing := ingest.New(cfg.IngestToken, cfg.IngestMaxBytes, s.pub, s.log.With("component", "ingest"))
	ingestRequests := metrics.Route(ingest.Path)

	s.ready.Check("engine", s.engineAnswered)
	s.ready.Details(s.readyDetails)
	mux := service.NewMux(reg, s.ready)
	mux.Handle(ingest.Path, ingestRequests(ing))
	mux.Handle("/", p)
	return mux, nil
}

// readyDetails is the state /readyz shows besides readiness. NATS being away, or its streams not
// set up yet ("stream_check" says what is missing), does not make the gateway unready: requests
// are still served and their events spooled.
func (s *Server) readyDetails() map[string]any {
	st := s.pub.Stats()
	d := map[string]any{
		"nats_connected": s.nc.IsConnected(),
		"spool_events":   st.SpoolEvents,
		"spool_bytes":    st.SpoolBytes,
		"dropped":        st.Dropped,
	}
	if err := s.pub.StreamCheck(); err != nil {
		d["stream_check"] = err.Error()
	}
	return d
}

// engineAnswered is /readyz's engine check: nil once any engine has answered GET /health (vLLM's
// health endpoint: 200 while its engine runs, 503 once it died) with 200 since the gateway
// started, so that a gateway pointed at the wrong engines never takes traffic. After that the
// engines are not asked again: an engine that fails later is the failure the gateway exists to
// record (its clients get the engine's errors through it, recorded), which taking the gateway
// out of rotation would hide; and vLLM logs every /health request.
func (s *Server) engineAnswered(ctx context.Context) error {
	if s.engineSeen.Load() {
		return nil
	}
	errs := make([]error, len(s.engines))
	var wg sync.WaitGroup
	for i, u := range s.engines {
		wg.Go(func() { errs[i] = s.engineHealthy(ctx, u) })
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			if !s.engineSeen.Swap(true) {
				s.log.Info("an engine answered GET /health: ready")
			}
			return nil
		}
	}
	return fmt.Errorf("no engine has answered GET /health yet: %w", errors.Join(errs...))
}

func (s *Server) engineHealthy(ctx context.Context, u *url.URL) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String()+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := s.engineHealth.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: GET /health: HTTP %d", u.Redacted(), resp.StatusCode)
	}
	return nil
}

// Addr is the address the gateway listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Publisher is the gateway's event publisher (for its counters).
func (s *Server) Publisher() *publish.Publisher { return s.pub }

// Run serves until ctx ends or serving fails, then shuts down in this order:
//  1. /readyz answers 503 (draining);
//  2. the listener stops accepting, and in-flight requests (streams included) get up to
//     ShutdownTimeout to finish;
//  3. the heartbeat stops, after a last one saying what is still open (normally nothing);
//  4. the recorder hands its last events to the publisher;
//  5. the publisher flushes them to JetStream or the spool (up to ShutdownTimeout);
//  6. the NATS connection closes.
func (s *Server) Run(ctx context.Context) error {
	g := service.NewGroup(s.log)
	g.AddStop("readiness", s.ready.Stopping)
	g.AddServer("http", s.http, s.ln, s.cfg.ShutdownTimeout)
	if s.cfg.HeartbeatInterval > 0 {
		g.AddContext("heartbeat", s.heartbeat)
	}
	g.AddStop("recorder", s.proxy.Close)
	g.AddStop("publisher", func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		if err := s.pub.Close(ctx); err != nil {
			s.log.Error("flush publisher", "error", err)
		}
		st := s.pub.Stats()
		s.log.Info("gateway stopped", "published", st.Published, "spooled", st.Spooled, "replayed", st.Replayed,
			"dropped", st.Dropped, "spool_events", st.SpoolEvents)
	})
	g.AddStop("nats", s.nc.Close)
	s.ready.Started()
	s.log.Info("gateway listening", "addr", s.Addr(), "upstream", s.cfg.UpstreamURL, "subject_prefix", s.cfg.NATS.SubjectPrefix)
	return g.Run(ctx)
}

// heartbeat publishes gateway.heartbeat every HeartbeatInterval until ctx ends, and once more
// then: the gateway's open requests, so that the detector counts a request that hangs for as
// long as it hangs and stops counting it when it ends (or when the heartbeats stop, the gateway
// and its connections gone). Like every record it goes through the publisher, which never blocks
// and spools while NATS is away.
func (s *Server) heartbeat(ctx context.Context) error {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		s.publishHeartbeat(time.Now())
		select {
		case <-ctx.Done():
			s.publishHeartbeat(time.Now())
			return nil
		case <-t.C:
		}
	}
}

func (s *Server) publishHeartbeat(now time.Time) {
	e := schema.NewGatewayHeartbeat(record.Truncate(s.cfg.GatewayName, schema.MaxLabelBytes), now)
	e.IntervalSeconds, e.ListedAfterSeconds = s.cfg.HeartbeatInterval.Seconds(), s.cfg.HeartbeatListAfter.Seconds()
	n, open, omitted := s.proxy.Open(now, s.cfg.HeartbeatListAfter, schema.MaxOpenListed)
	e.InFlight, e.Open, e.OpenOmitted = uint32(n), open, uint32(omitted)
	if err := s.pub.Publish(e); err != nil {
		s.log.Error("heartbeat not published", "error", err)
	}
}

func (s *Server) closeBackground() {
	if s.proxy != nil {
		s.proxy.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.pub.Close(ctx)
	s.nc.Close()
}
