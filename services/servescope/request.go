package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/requestview"
	detectorservice "github.com/servescope/servescope/services/detector/service"
)

func newRequestCmd() *cobra.Command {
	var (
		arrival, rulesDir string
		asJSON, content   bool
	)
	cmd := &cobra.Command{
		Use:   "request ID",
		Short: "Show one request whole: timeline with sources, tokens, status, the engine's state and log, the application's record",
		Long: `request finds a request by its gateway request id (the caller's X-Request-Id when it sent
one), the engine's response id (chatcmpl-…), its trace id or an engine request id, and prints what
servescope recorded of it: the timeline (arrival, queue, prefill, first token, decode, end) with the
source of each figure; tokens in, out and cached; the stop reason; the status and the error's
layer; the client's view (TTFT, TPOT, E2E, aborted or not); the engine's state when it arrived
(running, waiting, KV use from the nearest samples and its stats line, and the slot limit); the
engine's log lines of its span and any crash it was caught in; the application's record (passages
and scores, versions, language check, citations). The console shows the same at /request/ID.

A caller's X-Request-Id can repeat: when the id names several requests the command lists them;
pick one with --arrival (its arrival time as listed). --content prints the captured prompt and
output text (content capture on, and an account allowed to read it).

The slot limit comes from the engine's start-up log line, else from the slot_limit rule
(DETECTOR_RULES_DIR's, else the built-in one).
Exit codes: 0 when it printed the request (or the list), 1 when no request carries the id or
the arguments are wrong, 2 when the data could not be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if err := requestview.CheckID(id); err != nil {
				return err
			}
			var at time.Time
			if arrival != "" {
				var err error
				if at, err = requestview.ParseArrival(arrival); err != nil {
					return fmt.Errorf("--arrival: %w", err)
				}
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
			ms, err := requestview.Find(cmd.Context(), conn, id)
			if errors.Is(err, requestview.ErrNotFound) {
				return err
			}
			if err != nil {
				return dataUnreadable(err)
			}
			m, ok := requestview.Pick(ms, at)
			if !ok {
				if !at.IsZero() {
					return fmt.Errorf("no request with id %s arrived at %s (%d carry the id; leave out --arrival to list them)", id, arrival, len(ms))
				}
				if asJSON {
					return writeJSON(cmd, map[string]any{"id": id, "matches": ms})
				}
				return requestview.WriteMatches(cmd.OutOrStdout(), id, ms)
			}
			r, err := requestview.Load(cmd.Context(), conn, m, requestview.Options{Content: content, SlotLimit: requestview.RuleSlotLimit(defs)})
			if err != nil {
				return dataUnreadable(err)
			}
			if asJSON {
				return writeJSON(cmd, r)
			}
			if err := r.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nIn the console: %s\n", requestview.ConsolePath(r.Match, len(ms) > 1))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&arrival, "arrival", "", "of several requests carrying the id, the one that arrived at this time (as listed)")
	fl.BoolVar(&content, "content", false, "print the captured prompt and output text")
	fl.StringVar(&rulesDir, "rules-dir", os.Getenv("DETECTOR_RULES_DIR"), "the detector's rules directory, for the slot_limit rule's max_num_seqs (default $DETECTOR_RULES_DIR, else the built-in rules)")
	fl.BoolVar(&asJSON, "json", false, "print the request (or the list) as JSON")
	return cmd
}

func writeJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
