package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/spf13/cobra"

	builtin "github.com/servescope/servescope/deploy/detector"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/detector/rules"
	"github.com/servescope/servescope/services/detector/rulestest"
	"github.com/servescope/servescope/services/detector/slo"
)

// rulesConfig is what `rules check` and `rules test` read: the ClickHouse server and the
// detector's rules directory.
type rulesConfig struct {
	ClickHouse config.ClickHouse
	// RulesDir is the detector's DETECTOR_RULES_DIR, checked with the built-in rules when no file
	// is named.
	RulesDir string `env:"DETECTOR_RULES_DIR"`
	// SLOsDir is the detector's DETECTOR_SLOS_DIR, checked with the built-in SLOs when no file is
	// named.
	SLOsDir string `env:"DETECTOR_SLOS_DIR"`
}

func newRulesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Check the detector's rule files against ClickHouse, and run their unit tests",
	}
	check := &cobra.Command{
		Use:   "check [FILE|DIR ...]",
		Short: "Parse rule files and dry-run their SQL on ClickHouse; print the first error of each file",
		Long: "Checks each rule file as the detector loads it (YAML keys, durations, labels, parameters, the\n" +
			"summary and description templates rendered for sample rows), then runs its query on the\n" +
			"ClickHouse database of SERVESCOPE_CLICKHOUSE_* with the parameters the detector binds: EXPLAIN\n" +
			"(unknown tables, columns, functions, a {name:Type} parameter the rule does not set), then once\n" +
			"over an empty window (the result's columns). An SLO file (one with objectives:, see\n" +
			"docs/slo.md) is checked as the detector loads it, and each burn-rate rule it generates as a\n" +
			"rule file. Without arguments: the built-in rules and SLOs and the *.yaml files of\n" +
			"DETECTOR_RULES_DIR and DETECTOR_SLOS_DIR. A directory stands for its *.yaml and *.yml files.\n" +
			"Prints one line per file, with file:line for an error; exits 1 when any file has one.",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load[rulesConfig]()
			if err != nil {
				return err
			}
			files, err := ruleFiles(args, cfg.RulesDir)
			if err != nil {
				return err
			}
			if len(args) == 0 {
				sloFiles, err := builtinSLOFiles(cfg.SLOsDir)
				if err != nil {
					return err
				}
				files = append(files, sloFiles...)
			}
			conn, err := chstore.Open(cmd.Context(), cfg.ClickHouse)
			if err != nil {
				return err
			}
			defer conn.Close()
			out := cmd.OutOrStdout()
			bad := 0
			seen := map[string]string{}
			// A user file naming a built-in rule replaces it in the detector (rules.Merge): said
			// here, so that an override is never silent.
			builtins := map[string]bool{}
			if defs, err := rules.Load(builtin.Rules, builtin.RulesDir); err == nil {
				for _, d := range defs {
					builtins[d.Name] = true
				}
			}
			for _, f := range files {
				if f.isSLO() {
					ok, err := checkSLO(cmd, conn, f, out)
					if err != nil {
						return err
					}
					if !ok {
						bad++
					}
					continue
				}
				d, err := f.parse()
				if err == nil {
					err = rules.Check(cmd.Context(), conn, d)
					if err != nil && !rules.IsServerVerdict(err) {
						return fmt.Errorf("check %s: %w", f.name, err)
					}
				}
				// Two files of one directory naming the same rule: the detector would keep one.
				if err == nil && !f.builtin {
					if other, ok := seen[d.Name]; ok {
						err = &rules.FileError{File: f.name, Line: d.Line("name"), Key: "name",
							Err: fmt.Errorf("rule %s is also defined in %s", d.Name, other)}
					}
					seen[d.Name] = f.name
				}
				if err != nil {
					bad++
					fmt.Fprintf(out, "FAIL %v\n", err)
					continue
				}
				note := ""
				if !f.builtin && builtins[d.Name] {
					note = ", replaces the built-in rule"
				}
				fmt.Fprintf(out, "ok   %s (rule %s%s)\n", f.name, d.Name, note)
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d rule files have errors", bad, len(files))
			}
			return nil
		},
	}
	var at string
	test := &cobra.Command{
		Use:   "test [FILE ...]",
		Short: "Run rule unit tests: rows in, the detector's alerts out, compared with the expected ones",
		Long: "Each test file gives rows for servescope's tables at times relative to time 0 and the alerts\n" +
			"expected at evaluation times (see the rulestest package documentation, and the built-in\n" +
			"rules' tests in deploy/detector/tests/). Each test gets a fresh database on the ClickHouse\n" +
			"server of SERVESCOPE_CLICKHOUSE_* (created, migrated, dropped: the account needs CREATE and\n" +
			"DROP DATABASE), and the detector's alerting engine is evaluated with the clock pinned.\n" +
			"Without arguments: the built-in rules' tests. Exits 1 when an expectation does not hold.",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load[rulesConfig]()
			if err != nil {
				return err
			}
			opts := rulestest.Options{ClickHouse: cfg.ClickHouse}
			if at != "" {
				if opts.Time0, err = time.Parse(time.RFC3339, at); err != nil {
					return fmt.Errorf("--at: want an RFC 3339 time like 2026-11-30T09:00:00Z: %w", err)
				}
			}
			if opts.Builtin, err = rules.Load(builtin.Rules, builtin.RulesDir); err != nil {
				return fmt.Errorf("built-in rules: %w", err)
			}
			if opts.BuiltinSLOs, err = slo.LoadBuiltin(builtin.SLOs, builtin.SLOsDir, builtin.RepoDir); err != nil {
				return fmt.Errorf("built-in SLOs: %w", err)
			}
			files, err := testFiles(args)
			if err != nil {
				return err
			}
			return runRuleTests(cmd, files, opts)
		},
	}
	test.Flags().StringVar(&at, "at", "", "time 0 of every test, RFC 3339 (default: now, to the minute)")
	cmd.AddCommand(check, test)
	return cmd
}

// ruleFile is a rule file to check: on disk, or built in.
type ruleFile struct {
	name    string
	builtin bool
	data    []byte
}

func (f ruleFile) parse() (*rules.Definition, error) {
	if f.builtin {
		return rules.Parse(f.name, f.data)
	}
	return rules.ParseFile(f.name)
}

// isSLO reports whether the file is an SLO file (a top-level objectives key).
func (f *ruleFile) isSLO() bool {
	if f.data == nil && !f.builtin {
		f.data, _ = os.ReadFile(f.name)
	}
	return slo.IsSLOFile(f.data)
}

// builtinSLOFiles lists the built-in SLO files and those of dir (when not empty).
func builtinSLOFiles(dir string) ([]ruleFile, error) {
	var out []ruleFile
	entries, err := fs.ReadDir(builtin.SLOs, builtin.SLOsDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := fs.ReadFile(builtin.SLOs, path.Join(builtin.SLOsDir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, ruleFile{name: path.Join(builtin.RepoDir, builtin.SLOsDir, e.Name()), builtin: true, data: data})
	}
	if dir == "" {
		return out, nil
	}
	user, err := ruleFiles([]string{dir}, "")
	if err != nil {
		return nil, err
	}
	return append(out, user...), nil
}

// checkSLO checks an SLO file: it parses as the detector loads it, and each rule it generates
// passes rules.Check. It prints ok or FAIL as the rule files' lines; an error means the check
// could not run (ClickHouse unreachable).
func checkSLO(cmd *cobra.Command, conn driver.Conn, f ruleFile, out io.Writer) (bool, error) {
	d, err := slo.Parse(f.name, f.data)
	var names []string
	if err == nil {
		var rs []*rules.Definition
		if rs, err = d.Rules(); err == nil {
			for _, r := range rs {
				names = append(names, r.Name)
				if err = rules.Check(cmd.Context(), conn, r); err != nil {
					if !rules.IsServerVerdict(err) {
						return false, fmt.Errorf("check %s: %w", f.name, err)
					}
					err = fmt.Errorf("generated rule %s: %w", r.Name, err)
					break
				}
			}
		}
	}
	if err != nil {
		fmt.Fprintf(out, "FAIL %v\n", err)
		return false, nil
	}
	fmt.Fprintf(out, "ok   %s (slo %s: rules %s)\n", f.name, d.Name, strings.Join(names, ", "))
	return true, nil
}

// ruleFiles lists the files named by args (files, or directories of *.yaml and *.yml), or without
// arguments the built-in rules and those of dir.
func ruleFiles(args []string, dir string) ([]ruleFile, error) {
	var out []ruleFile
	if len(args) == 0 {
		entries, err := fs.ReadDir(builtin.Rules, builtin.RulesDir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			data, err := fs.ReadFile(builtin.Rules, path.Join(builtin.RulesDir, e.Name()))
			if err != nil {
				return nil, err
			}
			out = append(out, ruleFile{name: path.Join(builtin.RepoDir, builtin.RulesDir, e.Name()), builtin: true, data: data})
		}
		if dir == "" {
			return out, nil
		}
		args = []string{dir}
	}
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			out = append(out, ruleFile{name: a})
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
				out = append(out, ruleFile{name: filepath.Join(a, e.Name())})
			}
		}
	}
	return out, nil
}

// testFiles reads the test files named by args, or without arguments the built-in rules' tests.
func testFiles(args []string) ([]*rulestest.File, error) {
	var out []*rulestest.File
	if len(args) > 0 {
		for _, a := range args {
			f, err := rulestest.ReadFile(a)
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
		return out, nil
	}
	entries, err := fs.ReadDir(builtin.Tests, builtin.TestsDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, err := fs.ReadFile(builtin.Tests, path.Join(builtin.TestsDir, e.Name()))
		if err != nil {
			return nil, err
		}
		f, err := rulestest.Parse(path.Join(builtin.RepoDir, builtin.TestsDir, e.Name()), data)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// runRuleTests runs each file and prints ok or FAIL with the differences.
func runRuleTests(cmd *cobra.Command, files []*rulestest.File, opts rulestest.Options) error {
	out := cmd.OutOrStdout()
	failed := 0
	for _, f := range files {
		start := time.Now()
		res, err := rulestest.Run(cmd.Context(), f, opts)
		if err != nil {
			return err
		}
		printResult(out, res, time.Since(start))
		if len(res.Failures) > 0 {
			failed++
		}
	}
	if failed > 0 {
		return errors.New(plural(failed, "test file") + " failed")
	}
	return nil
}

func printResult(out io.Writer, res *rulestest.Result, took time.Duration) {
	if len(res.Failures) == 0 {
		fmt.Fprintf(out, "ok   %s (%s, %s, %.1fs)\n", res.File, plural(res.Cases, "test"), plural(res.Checks, "expectation"), took.Seconds())
		return
	}
	fmt.Fprintf(out, "FAIL %s (%d of %s failed)\n", res.File, len(res.Failures), plural(res.Checks, "expectation"))
	for _, f := range res.Failures {
		fmt.Fprintln(out, "  "+strings.ReplaceAll(f, "\n", "\n  "))
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
