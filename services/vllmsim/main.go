// Command vllmsim is a vLLM-compatible engine simulator: vLLM's OpenAI API server on the wire,
// its /metrics, its log lines and its OTLP spans, in front of a simulated engine (package engine)
// calibrated on the reference's RTX 3060 measurements. It lets servescope's demo and tests run
// without a GPU. Every flag can also be set with VLLMSIM_<NAME> (e.g. VLLMSIM_MAX_NUM_SEQS=128);
// a flag given on the command line wins.
//
// Time: --time-scale N runs the simulation N times faster than the wall clock. Everything the
// simulator reports (metrics, per-request metrics, spans, log timestamps) is in simulated seconds,
// so the numbers stay comparable to a real engine; a client measuring wall-clock latency sees
// them divided by N (loadgen's --time-scale multiplies them back).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/servescope/servescope/services/vllmsim/engine"
	"github.com/servescope/servescope/services/vllmsim/release"
	"github.com/servescope/servescope/services/vllmsim/sim"
	"github.com/servescope/servescope/services/vllmsim/simserver"
	"github.com/servescope/servescope/services/vllmsim/simtrace"
)

type config struct {
	Listen              string  `env:"LISTEN" envDefault:":8000"`
	Model               string  `env:"MODEL" envDefault:"servescope/sim-7b"`
	MaxModelLen         int     `env:"MAX_MODEL_LEN" envDefault:"4096"`
	MaxNumSeqs          int     `env:"MAX_NUM_SEQS" envDefault:"256"`
	MaxNumBatchedTokens int     `env:"MAX_NUM_BATCHED_TOKENS" envDefault:"2048"`
	KVCacheTokens       int     `env:"KV_CACHE_TOKENS" envDefault:"100000"`
	VocabSize           int     `env:"VOCAB_SIZE" envDefault:"152064"`
	TimeScale           float64 `env:"TIME_SCALE" envDefault:"1.0"`
	LogFile             string  `env:"LOG_FILE"`
	OTLPEndpoint        string  `env:"OTLP_ENDPOINT"`
	OTLPProtocol        string  `env:"OTLP_PROTOCOL" envDefault:"grpc"`
	CrashAtRunning      int     `env:"CRASH_AT_RUNNING" envDefault:"0"`
	WrongLanguageShare  float64 `env:"WRONG_LANGUAGE_SHARE" envDefault:"0"`
	SlowShare           float64 `env:"SLOW_SHARE" envDefault:"0"`
	SlowDelayS          float64 `env:"SLOW_DELAY_S" envDefault:"5"`
	DropShare           float64 `env:"DROP_SHARE" envDefault:"0"`
	PerRequestMetrics   bool    `env:"ENABLE_PER_REQUEST_METRICS" envDefault:"false"`
	VLLMVersion         string  `env:"VLLM_VERSION" envDefault:"main"`
	LogFormat           string  `env:"LOG_FORMAT" envDefault:"text"`
}

func loadConfig(args []string) (config, error) {
	var c config
	if err := env.ParseWithOptions(&c, env.Options{Prefix: "VLLMSIM_"}); err != nil {
		return c, fmt.Errorf("read VLLMSIM_* environment: %w", err)
	}
	fs := flag.NewFlagSet("vllmsim", flag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve the OpenAI API, /metrics and /health on")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "context length in tokens (prompt + output)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "running slots")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "tokens scheduled per engine step")
	fs.IntVar(&c.KVCacheTokens, "kv-cache-tokens", c.KVCacheTokens, "KV cache capacity in tokens")
	fs.IntVar(&c.VocabSize, "vocab-size", c.VocabSize, "vocabulary size (logits width, used by the OOM crash)")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "simulated seconds per wall second (10 runs ten times faster; reports stay in simulated seconds)")
	fs.StringVar(&c.LogFile, "log-file", c.LogFile, "append vLLM-shaped log lines to this file instead of stdout")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "export one llm_request span per request to this OTLP endpoint (host:port)")
	fs.StringVar(&c.OTLPProtocol, "otlp-protocol", c.OTLPProtocol, "OTLP protocol: grpc or http/protobuf")
	fs.IntVar(&c.CrashAtRunning, "crash-at-running", c.CrashAtRunning, "die with a CUDA OOM in the sampler when running exceeds this (0 = never)")
	fs.Float64Var(&c.WrongLanguageShare, "wrong-language-share", c.WrongLanguageShare, "share of answers with CJK characters mixed in (0..1)")
	fs.Float64Var(&c.SlowShare, "slow-share", c.SlowShare, "share of requests delayed before reaching the engine (0..1)")
	fs.Float64Var(&c.SlowDelayS, "slow-delay-s", c.SlowDelayS, "delay of slow requests, simulated seconds")
	fs.Float64Var(&c.DropShare, "drop-share", c.DropShare, "share of streams whose connection is cut mid-stream (0..1)")
	fs.BoolVar(&c.PerRequestMetrics, "enable-per-request-metrics", c.PerRequestMetrics, "add a per-request metrics object to responses")
	fs.StringVar(&c.VLLMVersion, "vllm-version", c.VLLMVersion, "vLLM release whose /metrics and log formats to emit: 0.8-v0 (V0 engine), 0.8, 0.10 or main")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log record format: text (vLLM's default) or json (a JSON formatter through VLLM_LOGGING_CONFIG_PATH)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.TimeScale <= 0:
		return c, fmt.Errorf("--time-scale must be > 0, got %g", c.TimeScale)
	case c.MaxNumSeqs < 1 || c.MaxModelLen < 16 || c.KVCacheTokens < c.MaxModelLen:
		return c, fmt.Errorf("need --max-num-seqs >= 1, --max-model-len >= 16 and --kv-cache-tokens >= --max-model-len")
	case c.WrongLanguageShare < 0 || c.WrongLanguageShare > 1 || c.SlowShare < 0 || c.SlowShare > 1 || c.DropShare < 0 || c.DropShare > 1:
		return c, fmt.Errorf("shares must be within [0, 1]")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return c, fmt.Errorf("--log-format must be text or json, got %q", c.LogFormat)
	}
	if _, err := release.Parse(c.VLLMVersion); err != nil {
		return c, fmt.Errorf("--vllm-version: %w", err)
	}
	return c, nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := loadConfig(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		log.Error("configuration", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var logOut io.Writer = os.Stdout
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			log.Error("open log file", "path", cfg.LogFile, "err", err)
			return 1
		}
		defer f.Close()
		logOut = f
	}

	ecfg := engine.DefaultConfig()
	ecfg.MaxModelLen = cfg.MaxModelLen
	ecfg.MaxNumSeqs = cfg.MaxNumSeqs
	ecfg.MaxNumBatchedTokens = cfg.MaxNumBatchedTokens
	ecfg.KVCacheTokens = cfg.KVCacheTokens
	ecfg.CrashAtRunning = cfg.CrashAtRunning
	ecfg.WrongLanguageShare = cfg.WrongLanguageShare
	clock := engine.NewClock(cfg.TimeScale)
	opts := sim.Options{
		Model: cfg.Model, VocabSize: cfg.VocabSize, Clock: clock, Engine: ecfg, LogWriter: logOut, APIPID: os.Getpid(),
		Release: release.Release(cfg.VLLMVersion), LogJSON: cfg.LogFormat == "json",
		Server: simserver.Config{PerRequestMetrics: cfg.PerRequestMetrics, SlowShare: cfg.SlowShare, SlowDelayS: cfg.SlowDelayS, DropShare: cfg.DropShare, Log: log},
	}
	if cfg.OTLPEndpoint != "" {
		exp, err := simtrace.New(ctx, cfg.OTLPEndpoint, cfg.OTLPProtocol, clock)
		if err != nil {
			log.Error("otlp exporter", "err", err)
			return 1
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := exp.Shutdown(sctx); err != nil {
				log.Warn("flush spans", "err", err)
			}
		}()
		opts.Observers = append(opts.Observers, exp)
	}
	s := sim.New(opts)
	eng, vlog := s.Engine, s.Log

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		log.Error("listen", "addr", cfg.Listen, "err", err)
		return 1
	}
	srv := &http.Server{
		Handler:           s.Handler,
		ReadHeaderTimeout: 10 * time.Second,
	}
	vlog.Startup(cfg.Model, cfg.MaxModelLen, ln.Addr().String())
	log.Info("vllmsim serving", "addr", ln.Addr().String(), "model", cfg.Model, "time_scale", cfg.TimeScale)
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()

	engErr := eng.Run(ctx)
	code := 0
	var crash *engine.CrashError
	switch {
	case errors.As(engErr, &crash):
		// In-flight handlers answer 500 from ErrEngineDead; give them a moment to flush, then
		// disappear like the real API server does after its engine core died.
		time.Sleep(200 * time.Millisecond)
		vlog.Shutdown()
		code = 1
	case errors.Is(engErr, context.Canceled):
	default:
		log.Error("engine stopped", "err", engErr)
		code = 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-srvErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("http server", "err", err)
		code = 1
	}
	return code
}
