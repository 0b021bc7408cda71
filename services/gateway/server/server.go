package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/servescope/servescope/schema/publish"
	"github.com/servescope/servescope/services/gateway/ingest"
	"github.com/servescope/servescope/services/gateway/proxy"
	"github.com/servescope/servescope/services/gateway/record"
)

// Server is a running gateway.
type Server struct {
	cfg      Config
	log      *slog.Logger
	nc       *nats.Conn
	pub      *publish.Publisher
	proxy    *proxy.Handler
	ln       net.Listener
	http     *http.Server
	draining atomic.Bool
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
	if cfg.IngestTokenFile != "" {
		b, err := os.ReadFile(cfg.IngestTokenFile)
		if err != nil {
			return nil, fmt.Errorf("SERVESCOPE_INGEST_TOKEN_FILE: %w", err)
		}
		cfg.IngestToken = strings.TrimRight(string(b), "\r\n")
	}
	s := &Server{cfg: cfg, log: log}

	nc, err := cfg.NATS.Connect("servescope-gateway",
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
	)
	if err != nil {
		return nil, err
	}
	s.nc = nc

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", s.readyz)
	mux.Handle(ingest.Path, ingestRequests(ing))
	mux.Handle("/", p)
	return mux, nil
}

// readyz answers 200 while the gateway takes traffic and 503 once it drains. NATS being away,
// or its streams not set up yet ("stream_check" says what is missing), does not make it unready:
// requests are still served and their events spooled.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	st := s.pub.Stats()
	body := map[string]any{
		"nats_connected": s.nc.IsConnected(),
		"spool_events":   st.SpoolEvents,
		"spool_bytes":    st.SpoolBytes,
		"dropped":        st.Dropped,
	}
	if err := s.pub.StreamCheck(); err != nil {
		body["stream_check"] = err.Error()
	}
	status := http.StatusOK
	if s.draining.Load() {
		status = http.StatusServiceUnavailable
		body["draining"] = true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// Addr is the address the gateway listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Publisher is the gateway's event publisher (for its counters).
func (s *Server) Publisher() *publish.Publisher { return s.pub }

// Run serves until ctx ends, then shuts down: it stops accepting, waits up to ShutdownTimeout
// for in-flight requests (streams included) to finish, and then flushes the publisher to
// JetStream or the spool.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.http.Serve(s.ln) }()
	s.log.Info("gateway listening", "addr", s.Addr(), "upstream", s.cfg.UpstreamURL, "subject_prefix", s.cfg.NATS.SubjectPrefix)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	s.draining.Store(true)
	s.log.Info("gateway shutting down: draining in-flight requests", "timeout", s.cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.http.Shutdown(sctx); err != nil {
		s.log.Warn("in-flight requests did not finish in time", "error", err)
		_ = s.http.Close()
	}
	s.proxy.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer pcancel()
	if err := s.pub.Close(pctx); err != nil {
		s.log.Error("flush publisher", "error", err)
	}
	st := s.pub.Stats()
	s.log.Info("gateway stopped", "published", st.Published, "spooled", st.Spooled, "replayed", st.Replayed,
		"dropped", st.Dropped, "spool_events", st.SpoolEvents)
	s.nc.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", s.Addr(), serveErr)
	}
	return nil
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
