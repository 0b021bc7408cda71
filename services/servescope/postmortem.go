package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/diagnose"
	"github.com/servescope/servescope/internal/postmortem"
	"github.com/servescope/servescope/schema"
)

func newPostmortemCmd() *cobra.Command {
	var (
		engine, at, logFile string
		vocab               int
		asJSON              bool
	)
	cmd := &cobra.Command{
		Use:   "postmortem",
		Short: "Read an engine's death from its own log: timeline, last words, frames and the memory arithmetic",
		Long: `postmortem reads the engine's log from engine_logs (or a vLLM log file with --log, "-" for
standard input) and reconstructs the death: the stats lines before it (running, waiting, KV), the
last words (exception, bytes requested, capacity, free), the innermost frames, and the check of
bytes requested against running × vocabulary × 4 bytes, concluding "activation-sized temporary
(type one limit)", "KV cache exhausted", "unexplained", or "cannot tell" when the engine that died
has no running count of its own (a data-parallel server logging only the engines' sum, with no
/metrics sample of that engine), with the fix that follows.

--at picks the death at or before that time (default: the latest). The vocabulary size comes from
--vocab-size, else from the model named in the log or the engine samples, else 152064 (Qwen2.5-7B).
A log file's year-less timestamps are read as UTC, within the year before the file's modification
time. Exit codes: 0 when it ran (also when no crash is found), 2 when the log could not be read or
holds no line.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := postmortem.Options{VocabSize: vocab}
			if vocab < 0 {
				return fmt.Errorf("--vocab-size must be positive, got %d", vocab)
			}
			if at != "" {
				t, err := diagnose.ParseTime(at)
				if err != nil {
					return fmt.Errorf("--at: %w", err)
				}
				opts.At = t
			}
			var lines []schema.EngineLog
			source := "engine_logs"
			if logFile != "" {
				var err error
				if lines, err = readLogFile(cmd, logFile, engine); err != nil {
					return dataUnreadable(err)
				}
				if len(lines) == 0 {
					return dataUnreadable(fmt.Errorf("log %s is empty", logFile))
				}
				source = "file " + logFile
			} else {
				cfg, err := config.Load[config.ClickHouse]()
				if err != nil {
					return err
				}
				conn, err := chstore.Open(cmd.Context(), cfg)
				if err != nil {
					return dataUnreadable(err)
				}
				defer conn.Close()
				if lines, opts.Model, err = postmortem.Load(cmd.Context(), conn, engine, opts.At); err != nil {
					return dataUnreadable(err)
				}
				// The engines' own running counts, for a data-parallel server whose log has only
				// their sum (--aggregate-engine-logging).
				if opts.Samples, err = postmortem.LoadSamples(cmd.Context(), conn, lines[0].Engine, lines); err != nil {
					return dataUnreadable(err)
				}
			}
			rep := postmortem.Analyze(lines, opts)
			rep.Source = source
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteText(cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&engine, "engine", "", "engine name in engine_logs (default: the engine that died last); with --log, the name to report")
	fl.StringVar(&at, "at", "", "the death at or before this time (RFC 3339 or \"2006-01-02 15:04:05\", UTC)")
	fl.StringVar(&logFile, "log", "", "read this vLLM log file instead of engine_logs (\"-\": standard input)")
	fl.IntVar(&vocab, "vocab-size", 0, "vocabulary size of the served model (logits width); default from the model name, else 152064")
	fl.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// readLogFile parses a vLLM log file (or standard input for "-").
func readLogFile(cmd *cobra.Command, path, engine string) ([]schema.EngineLog, error) {
	var r io.Reader = cmd.InOrStdin()
	now := time.Now()
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open log: %w", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			now = st.ModTime()
		}
		r = f
	}
	if engine == "" {
		engine = path
	}
	return postmortem.ReadLog(r, engine, path, now, time.UTC)
}
