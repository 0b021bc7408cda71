package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/capacity"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/diagnose"
)

func newDiagnoseCmd() *cobra.Command {
	var (
		since, baseline time.Duration
		from, to, model string
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Compare a window's serving quantities with a baseline and walk the incident signatures",
		Long: `diagnose computes, for the window and for the baseline, every quantity serving incidents
leave their signature on (tokens in/out, queue wait, prefill, TTFT, TPOT, decode, E2E,
running/waiting/KV maxima, error rates, length stops, top retrieval score, wrong-script share),
prints them side by side, and walks the hypotheses: queue-dominated overload, long prompts, long
outputs, generation contention, retrieval drift or version change, wrong-language output, engine
crash. Each conclusion names its numbers and what they could not rule out. Then, per engine, the
capacity headroom over the window (capacity_window, docs/slo.md): the arrival rate, Little's law,
the slot and KV limits, which comes first and the arrival rate at which requests start to queue,
with the arithmetic.

Times are RFC 3339 (2026-09-11T15:53:00Z) or "2006-01-02 15:04[:05]" in UTC. The baseline is the
--baseline period just before the window (default 24h). A baseline of 6h or more holding 100,000
requests or more is read as its whole hours (ending at the start of the window's hour) from
diagnose_hourly, which the detector keeps computed; the report says so.
Exit codes: 0 when it ran (with or without findings), 2 when the data could not be read or the
window holds no record.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var f, t time.Time
			var err error
			if from != "" {
				if f, err = diagnose.ParseTime(from); err != nil {
					return fmt.Errorf("--from: %w", err)
				}
			}
			if to != "" {
				if t, err = diagnose.ParseTime(to); err != nil {
					return fmt.Errorf("--to: %w", err)
				}
			}
			if to != "" && from == "" {
				return errors.New("--to needs --from")
			}
			window, base, err := diagnose.Ranges(time.Now(), since, f, t, baseline)
			if err != nil {
				return err
			}
			cfg, err := config.Load[config.ClickHouse]()
			if err != nil {
				return err
			}
			conn, err := chstore.Open(cmd.Context(), cfg)
			if err != nil {
				return dataUnreadable(err)
			}
			defer conn.Close()
			rep, err := diagnose.Run(cmd.Context(), conn, diagnose.Options{Window: window, Baseline: base, Model: model})
			if err != nil {
				return dataUnreadable(err)
			}
			// The headroom is read after the diagnosis and never fails it: a schema without
			// migrations/000041 says so in its place.
			engines, capErr := capacity.Read(cmd.Context(), conn, window.From, window.To, model)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				out := struct {
					diagnose.Report
					Capacity      []capacity.Engine `json:"capacity"`
					CapacityError string            `json:"capacity_error,omitempty"`
				}{Report: rep, Capacity: engines}
				if capErr != nil {
					out.CapacityError = capErr.Error()
				}
				return enc.Encode(out)
			}
			if err := rep.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			if capErr != nil {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "capacity: cannot tell: %v\n", capErr)
				return err
			}
			return capacity.WriteText(cmd.OutOrStdout(), engines)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&since, "since", 0, "window: the last DURATION until now, e.g. 15m")
	fl.StringVar(&from, "from", "", "window start (with --to, or until now)")
	fl.StringVar(&to, "to", "", "window end")
	fl.DurationVar(&baseline, "baseline", diagnose.DefaultBaseline, "baseline: this long just before the window")
	fl.StringVar(&model, "model", "", "only requests of this model")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
