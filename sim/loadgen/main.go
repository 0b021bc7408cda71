// Command loadgen drives an OpenAI-compatible LLM server (vLLM, vllmsim, or servescope's gateway)
// with the four workloads of docs/measurements.md, or a custom one, and reports the client-side
// latencies and the engine's own figures for that page's table. See package load for the measurement rules.
//
//	loadgen run --target http://127.0.0.1:8000 --scenario overload [--json]
//
// The common flags (--log.level, --log.format, --version) apply too. The exit code is 0 when the
// run completed, whatever errors it counted; 2 for bad usage; 1 when the run could not start.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/servescope/servescope/internal/service"
	"github.com/servescope/servescope/sim/loadgen/load"
)

func main() { os.Exit(execute(os.Args[1:])) }

// execute runs loadgen with args until SIGINT or SIGTERM and returns the exit status.
func execute(args []string) int {
	ctx, stop := service.SignalContext()
	defer stop()
	root := &cobra.Command{Use: "loadgen", Short: "Load generator for OpenAI-compatible LLM servers"}
	root.AddCommand(runCommand())
	return service.NewCobra("loadgen", root).Execute(ctx, args)
}

func runCommand() *cobra.Command {
	var (
		cfg         load.Config
		asJSON      bool
		stream      bool
		ignoreEOS   bool
		samePrompt  string
		streamShare float64
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run one scenario and print its report",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("duration") && cmd.Flags().Changed("requests") {
				return service.UsageError(fmt.Errorf("give --duration or --requests, not both"))
			}
			switch {
			case cmd.Flags().Changed("stream") && cmd.Flags().Changed("stream-share"):
				return service.UsageError(fmt.Errorf("give --stream or --stream-share, not both"))
			case cmd.Flags().Changed("stream-share"):
				cfg.StreamShare = &streamShare
			default:
				cfg.Stream = &stream
			}
			cfg.IgnoreEOS = &ignoreEOS
			switch samePrompt {
			case "":
			case "true", "false":
				v := samePrompt == "true"
				cfg.SamePrompt = &v
			default:
				return service.UsageError(fmt.Errorf("--same-prompt must be true or false"))
			}
			if term.IsTerminal(int(os.Stderr.Fd())) {
				var bar *progressbar.ProgressBar
				cfg.Prepared = func(total int) {
					bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr),
						progressbar.OptionSetDescription(cfg.Scenario), progressbar.OptionShowCount(),
						progressbar.OptionClearOnFinish())
				}
				cfg.Progress = func(done, _ int) {
					if bar != nil {
						_ = bar.Set(done)
					}
				}
			}
			rep, err := load.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteText(os.Stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Target, "target", "http://127.0.0.1:8000", "base URL of the server (gateway or engine)")
	f.StringVar(&cfg.MetricsURL, "metrics-url", "", "engine /metrics URL (default: target + /metrics; 'none' to skip)")
	f.StringVar(&cfg.Scenario, "scenario", "normal", "scenario: "+strings.Join(load.ScenarioNames(), ", "))
	f.StringVar(&cfg.Model, "model", "", "model name (default: first of GET /v1/models)")
	f.StringVar(&cfg.Endpoint, "endpoint", "chat", "API: chat (/v1/chat/completions) or completions (/v1/completions)")
	f.DurationVar(&cfg.Duration, "duration", 0, "arrival window in simulated time (default: the scenario's)")
	f.IntVar(&cfg.Requests, "requests", 0, "number of requests (instead of --duration)")
	f.Float64Var(&cfg.Rate, "rate", 0, "arrival rate, requests per simulated second (default: the scenario's)")
	f.IntVar(&cfg.PromptTokens, "prompt-tokens", 0, "prompt size in tokens, chat template included (default: the scenario's)")
	f.IntVar(&cfg.MaxTokens, "max-tokens", 0, "max_tokens per request (default: the scenario's)")
	f.BoolVar(&stream, "stream", true, "stream responses (needed for TTFT and TPOT)")
	f.Float64Var(&streamShare, "stream-share", 1, "share of requests that stream, 0 to 1, spread evenly (e.g. 0.5: every other one); the others get one JSON body")
	f.BoolVar(&ignoreEOS, "ignore-eos", true, "send vLLM's ignore_eos so answers run to max_tokens")
	f.StringVar(&samePrompt, "same-prompt", "", "true: one prompt for all requests; false: one per request (default: the scenario's)")
	f.StringVar(&cfg.Arrival, "arrival", "poisson", "arrival process: poisson or uniform (open loop either way)")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the Poisson arrivals")
	f.IntVar(&cfg.Concurrency, "concurrency", 0, "cap on in-flight requests (default 4096)")
	f.Float64Var(&cfg.TimeScale, "time-scale", 1, "the server's time scale (vllmsim --time-scale); figures stay in simulated seconds")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", 10*time.Minute, "wall-clock limit of one request")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
