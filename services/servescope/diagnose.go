package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/baseline"
	"github.com/servescope/servescope/internal/capacity"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/services/detector/rules"
	detectorservice "github.com/servescope/servescope/services/detector/service"
)

func newDiagnoseCmd() *cobra.Command {
	var (
		since, length, offset     time.Duration
		from, to, model, complain string
		rulesDir                  string
		asJSON                    bool
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

The window is also read at the resolution of the detector's rules: each hypothesis on windows of
its rule's length (overlapping by half), reporting the worst; and the alerts the detector fired in
the window are named first. A hypothesis is "clear" only when the whole window, every such window
and every alert of its rule agree; where the data cannot decide, it says "cannot tell". The rules
are the built-in ones and those of --rules-dir (DETECTOR_RULES_DIR), as the detector loads them.
With --complaint, the verdict of that complaint's console page comes first.

Times are RFC 3339 (2026-09-11T15:53:00Z) or "2006-01-02 15:04[:05]" in UTC. The baseline is the
detector's: the --baseline period (default 24h) ending --baseline-offset (default 1h) before the
window starts, so that an incident already under way when the window starts is not part of it
(docs/concepts.md, The baseline). A baseline of 6h or more holding 100,000 requests or more is
read as its whole hours from diagnose_hourly, which the detector keeps computed; the report says
which period it compared with and where it read it from. A quantity the baseline holds none of
reads "no baseline", never 0.
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
			spec := baseline.Spec{Length: length, Offset: offset}
			window, base, err := diagnose.Ranges(time.Now(), since, f, t, spec)
			if err != nil {
				return err
			}
			if complain != "" {
				if _, ok := diagnose.ComplaintByID(complain); !ok {
					return fmt.Errorf("--complaint %q: want one of %s", complain, complaintIDs())
				}
			}
			if rulesDir == "" {
				rulesDir = os.Getenv("DETECTOR_RULES_DIR")
			}
			defs, err := detectorservice.LoadRules(rulesDir)
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
			rep, err := diagnose.Run(cmd.Context(), conn, diagnose.Options{Window: window, Baseline: base, Model: model,
				RuleWindows: ruleWindows(defs), BaselineRule: spec.Describe()})
			if err != nil {
				return dataUnreadable(err)
			}
			var verdict *diagnose.Verdict
			if complain != "" {
				v, err := rep.Verdict(complain)
				if err != nil {
					return err
				}
				verdict = &v
			}
			// The headroom is read after the diagnosis and never fails it: a schema without
			// migrations/000041 says so in its place.
			engines, capErr := capacity.Read(cmd.Context(), conn, window.From, window.To, model)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				out := struct {
					Verdict *diagnose.Verdict `json:"verdict,omitempty"`
					diagnose.Report
					Capacity      []capacity.Engine `json:"capacity"`
					CapacityError string            `json:"capacity_error,omitempty"`
				}{Verdict: verdict, Report: rep, Capacity: engines}
				if capErr != nil {
					out.CapacityError = capErr.Error()
				}
				return enc.Encode(out)
			}
			if verdict != nil {
				if err := rep.WriteVerdict(cmd.OutOrStdout(), *verdict); err != nil {
					return err
				}
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
	fl.DurationVar(&length, "baseline", baseline.Default.Length, "baseline: this long, ending --baseline-offset before the window starts")
	fl.DurationVar(&offset, "baseline-offset", baseline.Default.Offset, "baseline: how long before the window starts it ends")
	fl.StringVar(&complain, "complaint", "", "print the verdict of this complaint's page first: "+complaintIDs())
	fl.StringVar(&rulesDir, "rules-dir", "", "the detector's DETECTOR_RULES_DIR (default: that variable), for the rules' windows")
	fl.StringVar(&model, "model", "", "only requests of this model")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// ruleWindows maps each rule to its window: the resolution diagnose reads a range at.
func ruleWindows(defs []*rules.Definition) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, d := range defs {
		out[d.Name] = d.Window.D()
	}
	return out
}

func complaintIDs() string {
	ids := make([]string, len(diagnose.Complaints))
	for i, c := range diagnose.Complaints {
		ids[i] = c.ID
	}
	return strings.Join(ids, ", ")
}
