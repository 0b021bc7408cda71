// Command vllmsim is a vLLM-compatible engine simulator: vLLM's OpenAI API server on the wire, its
// /metrics, its log lines and its OTLP spans, in front of a simulated engine (package engine)
// calibrated on the RTX 3060 measurements of docs/measurements.md. It lets servescope's demo and
// tests run without a GPU. --vllm-version selects whose formats it serves (0.8-v0, 0.8, 0.10 or
// main, the default). Every flag can also be set with VLLMSIM_<NAME> (e.g.
// VLLMSIM_MAX_NUM_SEQS=128); a flag given on the command line wins.
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
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/simserver"
	"github.com/servescope/servescope/sim/vllmsim/simtrace"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
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
	OutputLenMedian     int     `env:"OUTPUT_LEN_MEDIAN" envDefault:"0"`
	OutputLenSigma      float64 `env:"OUTPUT_LEN_SIGMA" envDefault:"0.2"`
	SlowShare           float64 `env:"SLOW_SHARE" envDefault:"0"`
	SlowDelaySeconds    float64 `env:"SLOW_DELAY_S" envDefault:"5"`
	DropShare           float64 `env:"DROP_SHARE" envDefault:"0"`
	PerRequestMetrics   bool    `env:"ENABLE_PER_REQUEST_METRICS" envDefault:"false"`
	VLLMVersion         string  `env:"VLLM_VERSION" envDefault:"main"`
	LogFormat           string  `env:"LOG_FORMAT" envDefault:"text"`
	PromptTokensDetails bool    `env:"ENABLE_PROMPT_TOKENS_DETAILS" envDefault:"false"`
	ForceIncludeUsage   bool    `env:"ENABLE_FORCE_INCLUDE_USAGE" envDefault:"false"`
	RequestIDHeaders    bool    `env:"ENABLE_REQUEST_ID_HEADERS" envDefault:"false"`
	EmbeddingDim        int     `env:"EMBEDDING_DIM" envDefault:"384"`
	DataParallelSize    int     `env:"DATA_PARALLEL_SIZE" envDefault:"1"`
	AggregateLogging    bool    `env:"AGGREGATE_ENGINE_LOGGING" envDefault:"false"`
	CrashEngine         int     `env:"CRASH_ENGINE" envDefault:"0"`

	version vllmversion.Version
}

// defineFlags defines one flag per config field, named after its VLLMSIM_ variable
// (VLLMSIM_MAX_NUM_SEQS is --max-num-seqs), with the field's current value as default.
func defineFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to serve the OpenAI API, /metrics and /health on")
	fs.StringVar(&c.Model, "model", c.Model, "served model name")
	fs.IntVar(&c.MaxModelLen, "max-model-len", c.MaxModelLen, "context length in tokens (prompt + output)")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", c.MaxNumSeqs, "running slots")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", c.MaxNumBatchedTokens, "tokens scheduled per engine step")
	fs.IntVar(&c.KVCacheTokens, "kv-cache-tokens", c.KVCacheTokens, "KV cache capacity in tokens")
	fs.IntVar(&c.VocabSize, "vocab-size", c.VocabSize, "vocabulary size (logits width, used by the OOM crash)")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "simulated seconds per wall second (10 runs ten times faster; reports stay in simulated seconds)")
	fs.StringVar(&c.LogFile, "log-file", c.LogFile, "append vLLM-shaped log lines to this file instead of stdout")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", c.OTLPEndpoint, "export llm_request spans to this OTLP endpoint (host:port) as --vllm-version does: one per engine request (per prompt and sample), one per sequence group at 0.8; resource service.name from OTEL_SERVICE_NAME, else \"unknown_service\"")
	fs.StringVar(&c.OTLPProtocol, "otlp-protocol", c.OTLPProtocol, "OTLP protocol: grpc or http/protobuf")
	fs.IntVar(&c.CrashAtRunning, "crash-at-running", c.CrashAtRunning, "die with a CUDA OOM in the sampler when running exceeds this (0 = never)")
	fs.Float64Var(&c.WrongLanguageShare, "wrong-language-share", c.WrongLanguageShare, "share of answers with CJK characters mixed in (0..1)")
	fs.IntVar(&c.OutputLenMedian, "output-len-median", c.OutputLenMedian, "median natural answer length in tokens, log-normal with --output-len-sigma (where an answer ends without ignore_eos; 0: uniform 32..1024)")
	fs.Float64Var(&c.OutputLenSigma, "output-len-sigma", c.OutputLenSigma, "log-space standard deviation of the natural answer length (with --output-len-median)")
	fs.Float64Var(&c.SlowShare, "slow-share", c.SlowShare, "share of requests delayed before reaching the engine (0..1)")
	fs.Float64Var(&c.SlowDelaySeconds, "slow-delay-s", c.SlowDelaySeconds, "delay of slow requests, simulated seconds")
	fs.Float64Var(&c.DropShare, "drop-share", c.DropShare, "share of streams whose connection is cut mid-stream (0..1)")
	fs.StringVar(&c.VLLMVersion, "vllm-version", c.VLLMVersion, "vLLM release to imitate (API, errors, spans, /metrics and log): 0.8-v0 (v0.8.5 on its V0 engine), 0.8 (v0.8.5, V1 engine; with --otlp-endpoint it runs V0 as vLLM 0.8 does), 0.10 (v0.10.2) or main")
	fs.BoolVar(&c.PerRequestMetrics, "enable-per-request-metrics", c.PerRequestMetrics, "add vLLM main's per-request timing object (\"metrics\") to non-streaming responses and to the final usage chunk of streams (main only)")
	fs.BoolVar(&c.PromptTokensDetails, "enable-prompt-tokens-details", c.PromptTokensDetails, "report usage.prompt_tokens_details.cached_tokens when prompt tokens came from the prefix cache (null otherwise, as vLLM)")
	fs.BoolVar(&c.ForceIncludeUsage, "enable-force-include-usage", c.ForceIncludeUsage, "end every stream with a usage chunk, as if stream_options.include_usage were true (0.10 and main)")
	fs.BoolVar(&c.RequestIDHeaders, "enable-request-id-headers", c.RequestIDHeaders, "answer every request with an X-Request-Id header: the request's, or a fresh uuid hex")
	fs.IntVar(&c.EmbeddingDim, "embedding-dim", c.EmbeddingDim, "length of /v1/embeddings vectors")
	fs.IntVar(&c.DataParallelSize, "data-parallel-size", c.DataParallelSize, "engine cores behind the one API server, each with --max-num-seqs slots and --kv-cache-tokens of KV cache; requests go to the least loaded (waiting × 4 + running), /metrics labels each engine's series engine=\"i\", the log has each engine's stats line (V1 releases)")
	fs.BoolVar(&c.AggregateLogging, "aggregate-engine-logging", c.AggregateLogging, "with --data-parallel-size, one \"N Engines Aggregated:\" stats line (sums, KV mean) instead of one per engine (main only)")
	fs.IntVar(&c.CrashEngine, "crash-engine", c.CrashEngine, "with --data-parallel-size, the engine core that --crash-at-running applies to; its death is the server's, as in vLLM")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log record format: text (vLLM's default) or json (a JSON formatter through VLLM_LOGGING_CONFIG_PATH)")
}

// validate checks the settings together and resolves the vLLM version.
func (c *config) validate() error {
	v, err := vllmversion.Parse(c.VLLMVersion)
	if err != nil {
		return fmt.Errorf("--vllm-version: %w", err)
	}
	if v == vllmversion.V0_8 && c.OTLPEndpoint != "" {
		// vLLM 0.8's V1 engine cannot trace: --otlp-traces-endpoint makes it fall back to the V0
		// engine (vllm/engine/arg_utils.py, _is_v1_supported_oracle), metrics and log included.
		v = vllmversion.V0_8V0
	}
	c.version = v
	switch {
	case c.PerRequestMetrics && !v.PerRequestMetrics():
		return fmt.Errorf("--enable-per-request-metrics does not exist in vLLM %s (main only)", v)
	case c.ForceIncludeUsage && !v.ForceIncludeUsage():
		return fmt.Errorf("--enable-force-include-usage does not exist in vLLM %s", v)
	case c.EmbeddingDim < 1:
		return fmt.Errorf("--embedding-dim must be >= 1, got %d", c.EmbeddingDim)
	case c.DataParallelSize < 1:
		return fmt.Errorf("--data-parallel-size must be >= 1, got %d", c.DataParallelSize)
	case c.DataParallelSize > 1 && !v.V1Engine():
		return fmt.Errorf("--data-parallel-size is the V1 engine's here, not vLLM %s's", v)
	case c.AggregateLogging && v != vllmversion.Main:
		return fmt.Errorf("--aggregate-engine-logging does not exist in vLLM %s (main only)", v)
	case c.CrashEngine < 0 || c.CrashEngine >= c.DataParallelSize:
		return fmt.Errorf("--crash-engine must be an engine index below --data-parallel-size (%d), got %d", c.DataParallelSize, c.CrashEngine)
	case c.OutputLenMedian < 0 || c.OutputLenSigma < 0:
		return fmt.Errorf("--output-len-median and --output-len-sigma must not be negative")
	}
	switch {
	case c.TimeScale <= 0:
		return fmt.Errorf("--time-scale must be > 0, got %g", c.TimeScale)
	case c.MaxNumSeqs < 1 || c.MaxModelLen < 16 || c.KVCacheTokens < c.MaxModelLen:
		return fmt.Errorf("need --max-num-seqs >= 1, --max-model-len >= 16 and --kv-cache-tokens >= --max-model-len")
	case c.WrongLanguageShare < 0 || c.WrongLanguageShare > 1 || c.SlowShare < 0 || c.SlowShare > 1 || c.DropShare < 0 || c.DropShare > 1:
		return fmt.Errorf("shares must be within [0, 1]")
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("--log-format must be text or json, got %q", c.LogFormat)
	}
	return nil
}

func main() { os.Exit(run(os.Args[1:])) }

// run is vllmsim with args, until SIGINT or SIGTERM; it returns the exit status.
func run(args []string) int {
	ctx, stop := service.SignalContext()
	defer stop()
	return command().Execute(ctx, args)
}

func command() *service.Command {
	c := service.NewCommand("vllmsim", "Usage: vllmsim [flags]\n\n"+
		"A vLLM-compatible engine simulator: vLLM's OpenAI API, /metrics, log lines and OTLP spans. Every flag also reads VLLMSIM_<NAME>.\n"+
		"--log-file and --log-format shape the vLLM log it imitates; --log.level and --log.format its own diagnostics on standard error.")
	cfg, envErr := newConfig(c.Flags)
	c.Run = func(ctx context.Context, log *slog.Logger, args []string) error {
		if envErr != nil {
			return service.UsageError(envErr)
		}
		if len(args) > 0 {
			return service.UsageError(fmt.Errorf("unexpected arguments %q", args))
		}
		if err := cfg.validate(); err != nil {
			return service.UsageError(err)
		}
		return serve(ctx, *cfg, log)
	}
	return c
}

// newConfig reads the VLLMSIM_* variables into a config and defines its flags on fs with those
// values as defaults; after fs is parsed, the config holds both (a flag given wins) and
// validate checks it.
func newConfig(fs *flag.FlagSet) (*config, error) {
	var c config
	err := env.ParseWithOptions(&c, env.Options{Prefix: "VLLMSIM_"})
	defineFlags(fs, &c)
	if err != nil {
		return &c, fmt.Errorf("read VLLMSIM_* environment: %w", err)
	}
	return &c, nil
}

// serve runs the simulator. Its parts stop in this order: the engine (its death by a simulated
// crash stops the rest and ends the process with status 1), the HTTP server (2 s for in-flight
// requests), the span exporter's flush.
func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	var logOut io.Writer = os.Stdout
	if cfg.LogFile != "" {
		f, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("open log file: %w", err)
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
	ecfg.NaturalLenMedian, ecfg.NaturalLenSigma = cfg.OutputLenMedian, cfg.OutputLenSigma
	clock := engine.NewClock(cfg.TimeScale)
	opts := sim.Options{
		Model: cfg.Model, Version: cfg.version, VocabSize: cfg.VocabSize, Clock: clock, Engine: ecfg, LogWriter: logOut, APIPID: os.Getpid(),
		LogJSON: cfg.LogFormat == "json", DataParallelSize: cfg.DataParallelSize, AggregateEngineLogging: cfg.AggregateLogging, CrashEngine: cfg.CrashEngine,
		Server: simserver.Config{
			PerRequestMetrics: cfg.PerRequestMetrics, EnablePromptTokensDetails: cfg.PromptTokensDetails,
			EnableForceIncludeUsage: cfg.ForceIncludeUsage, EnableRequestIDHeaders: cfg.RequestIDHeaders, EmbeddingDim: cfg.EmbeddingDim,
			SlowShare: cfg.SlowShare, SlowDelaySeconds: cfg.SlowDelaySeconds, DropShare: cfg.DropShare, Log: log,
		},
	}
	var exp *simtrace.Exporter
	if cfg.OTLPEndpoint != "" {
		var err error
		if exp, err = simtrace.New(ctx, cfg.OTLPEndpoint, cfg.OTLPProtocol, clock, simtrace.WithVersion(cfg.version)); err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		opts.Observers = append(opts.Observers, exp)
	}
	s := sim.New(opts)
	vlog := s.Log

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 10 * time.Second}

	g := service.NewGroup(log)
	g.AddContext("engine", func(ctx context.Context) error {
		err := s.Run(ctx)
		var crash *engine.CrashError
		switch {
		case errors.As(err, &crash):
			// In-flight handlers answer 500 from ErrEngineDead; give them a moment to flush, then
			// disappear like the real API server does after its engine core died.
			time.Sleep(200 * time.Millisecond)
			vlog.Shutdown()
			return service.Exit(1, nil) // the log has said it all
		case errors.Is(err, context.Canceled):
			return nil
		}
		return err
	})
	g.AddServer("http", srv, ln, 2*time.Second)
	if exp != nil {
		g.AddStop("otlp", func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := exp.Shutdown(sctx); err != nil {
				log.Warn("flush spans", "err", err)
			}
		})
	}
	vlog.Startup(cfg.Model, cfg.MaxModelLen, ln.Addr().String())
	log.Info("vllmsim serving", "addr", ln.Addr().String(), "model", cfg.Model, "vllm_version", cfg.version.String(), "time_scale", cfg.TimeScale)
	return g.Run(ctx)
}
