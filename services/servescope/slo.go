package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/slo"
)

func newSLOCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slo",
		Short: "Service level objectives: print the burn-rate rules an SLO generates, and each SLO's error budget",
	}
	var kind string
	print := &cobra.Command{
		Use:   "rules [FILE|DIR ...]",
		Short: "Print the burn-rate rule files the SLO files generate, as the detector loads them",
		Long: "Prints, for each SLO file, its page and ticket rules (the Google SRE workbook's multi-window,\n" +
			"multi-burn-rate alerts, docs/slo.md) as rule files, separated by ---. Each is what the detector\n" +
			"runs and what `servescope rules test` evaluates. Without arguments: the built-in SLOs and the\n" +
			"*.yaml files of DETECTOR_SLOS_DIR. --kind page or ticket prints one kind.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if kind != "" && kind != slo.KindPage && kind != slo.KindTicket {
				return fmt.Errorf("--kind %q: want page or ticket", kind)
			}
			defs, err := sloDefinitions(args)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			first := true
			for _, d := range defs {
				for _, k := range []string{slo.KindPage, slo.KindTicket} {
					if kind != "" && k != kind {
						continue
					}
					text, ok, err := d.RuleFile(k)
					if err != nil {
						return err
					}
					if !ok {
						continue
					}
					if !first {
						fmt.Fprintln(out, "---")
					}
					first = false
					if _, err := out.Write(text); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	print.Flags().StringVar(&kind, "kind", "", "page or ticket: print that kind only")
	var at string
	status := &cobra.Command{
		Use:   "status",
		Short: "Each SLO's error budget: left in its period, the burn rate of the last hour, when it runs out",
		Long: "Reads slo_error_budget (migrations/000040_slo.up.sql) for each SLO of slo_objectives (the SLOs the detector\n" +
			"loaded last) over its own period ending now (or --at), and prints per objective the requests\n" +
			"judged and bad, the budget left, the burn rate over the last hour (1: the budget lasts exactly\n" +
			"the period) and how long the budget left lasts at that rate. Exit code 2 when ClickHouse\n" +
			"cannot be read.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			end := time.Now().UTC()
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return fmt.Errorf("--at: want an RFC 3339 time like 2026-11-30T09:00:00Z: %w", err)
				}
				end = t.UTC()
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
			budgets, err := slo.ReadBudgets(cmd.Context(), conn, end)
			if err != nil {
				return dataUnreadable(err)
			}
			writeBudgets(cmd.OutOrStdout(), budgets, end)
			return nil
		},
	}
	status.Flags().StringVar(&at, "at", "", "the periods end at this RFC 3339 time instead of now")
	cmd.AddCommand(print, status)
	return cmd
}

// sloDefinitions reads the SLO files of args (files, or directories of *.yaml), or without
// arguments the built-in SLOs and DETECTOR_SLOS_DIR's.
func sloDefinitions(args []string) ([]*slo.Definition, error) {
	if len(args) == 0 {
		cfg, err := config.Load[rulesConfig]()
		if err != nil {
			return nil, err
		}
		defs, err := slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir)
		if err != nil {
			return nil, fmt.Errorf("built-in SLOs: %w", err)
		}
		if cfg.SLOsDir == "" {
			return defs, nil
		}
		user, err := slo.Load(os.DirFS(cfg.SLOsDir), ".")
		if err != nil {
			return nil, fmt.Errorf("DETECTOR_SLOS_DIR %s: %w", cfg.SLOsDir, err)
		}
		return slo.Merge(defs, user), nil
	}
	var out []*slo.Definition
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			d, err := slo.ParseFile(a)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
			continue
		}
		defs, err := slo.Load(os.DirFS(a), ".")
		if err != nil {
			return nil, err
		}
		for _, d := range defs {
			d.Source = filepath.Join(a, d.Source)
		}
		out = append(out, defs...)
	}
	return out, nil
}

func writeBudgets(out io.Writer, budgets []slo.Budget, end time.Time) {
	if len(budgets) == 0 {
		fmt.Fprintln(out, "no SLO in slo_objectives: the detector writes its SLOs there when it starts (DETECTOR_SLOS_DIR and the built-in ones)")
		return
	}
	fmt.Fprintf(out, "error budgets of the periods ending %s\n\n", end.Format("2006-01-02 15:04:05 MST"))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SLO\tobjective\ttarget\tperiod\tjudged\tbad\tbudget left\tburn rate (1 h)\tbudget lasts")
	for _, b := range budgets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", b.SLO, b.Objective, slo.FormatShare(b.Target),
			slo.Span(b.Period).String(), b.Judged, b.Bad, pctOrDash(b.BudgetLeft), burnText(b.BurnRate1h), lastsText(b))
	}
	tw.Flush()
}

func pctOrDash(v *float64) string {
	if v == nil {
		return "- (no request judged)"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func burnText(v *float64) string {
	if v == nil {
		return "- (no request in the last hour)"
	}
	return fmt.Sprintf("%.2f×", *v)
}

func lastsText(b slo.Budget) string {
	switch {
	case b.BudgetLeft != nil && *b.BudgetLeft <= 0:
		return "spent"
	case b.ExhaustedIn == nil:
		return "-"
	}
	d := *b.ExhaustedIn
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f d", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1f h", d.Hours())
	}
	return fmt.Sprintf("%.0f min", math.Ceil(d.Minutes()))
}
