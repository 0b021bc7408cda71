package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthcheckCmd lets container healthchecks probe a service's HTTP health endpoint from an
// image that has no shell or curl (distroless).
func newHealthcheckCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck URL",
		Short: "Exit 0 when URL answers 2xx within --timeout (for container healthchecks)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(args[0])
			if err != nil {
				return fmt.Errorf("healthcheck %s: %w", args[0], err)
			}
			resp.Body.Close()
			if resp.StatusCode < 200 || resp.StatusCode > 299 {
				return fmt.Errorf("healthcheck %s: status %d", args[0], resp.StatusCode)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
