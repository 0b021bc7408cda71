package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/internal/retry"
)

// streamsConfig is what the setup of the JetStream resources reads: the NATS connection, the
// subject prefix and stream limits (SERVESCOPE_NATS_*, SERVESCOPE_SUBJECT_PREFIX,
// SERVESCOPE_STREAM_*), and the consumer's settings that size its durable consumer (CONSUMER_*).
type streamsConfig struct {
	NATS     config.NATS
	Consumer config.Consumer
}

// streamsTimeout bounds the setup or check of the streams and the durable consumer.
const streamsTimeout = 60 * time.Second

// streamsRetry retries a setup or check that got no answer: a JetStream API request that reaches
// a cluster while it elects its metadata or a stream's leader (a node just lost, a cluster just
// started) can be dropped unanswered, and only sending it again gets an answer. Every step is
// idempotent (create or update, read), so a whole attempt is run again.
var streamsRetry = retry.Policy{Min: 250 * time.Millisecond, Max: 2 * time.Second, AttemptTimeout: 10 * time.Second}

func newStreamsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "streams",
		Short: "Set up or check the JetStream streams and the consumer's durable consumer",
		Long: "The setup step owns servescope's JetStream resources: the events stream, the dead-letter stream,\n" +
			"the consumer's durable consumer and the lease key-value bucket (SERVESCOPE_LEASE_TTL). `streams up` creates or updates them (`migrate up` runs it too);\n" +
			"the services only check them, as `streams check` does.",
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Create the streams, the durable consumer and the lease bucket, or update them to the settings given (one not given keeps its value; no-op when they match)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return streamsUp(cmd) },
	}
	check := &cobra.Command{
		Use:   "check",
		Short: "Check the streams, the durable consumer and the lease bucket as the services do, print where they differ from these settings, and fail on a cluster fault (no leader, a replica offline or behind)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return withJetStream(cmd, streamsCheck) },
	}
	cmd.AddCommand(up, check)
	return cmd
}

// errClusterFaults is returned by `streams check` when the JetStream cluster cannot serve a
// resource as it should; the faults are printed above the error.
var errClusterFaults = errors.New("the JetStream cluster has faults")

// streamsCheck checks the resources as the services do and prints where they differ from cfg,
// then reads their cluster state and prints each fault with what to do: a fault fails the check
// (its configuration alone says nothing of whether JetStream can serve it). The cluster state is
// read first, so that a fault that also keeps the configuration from being read is still named.
func streamsCheck(ctx context.Context, js jetstream.JetStream, cfg streamsConfig, out io.Writer) error {
	topo := cfg.NATS.Topology()
	d := cfg.Consumer.DurableConsumer()
	// A resource missing or JetStream off is for CheckConsumer to say, in its words.
	faults, clusterErr := bus.CheckCluster(ctx, js, topo, d.Name)
	report := func(err error) error {
		for _, f := range faults {
			fmt.Fprintln(out, f)
		}
		if len(faults) == 0 {
			return err
		}
		return errors.Join(fmt.Errorf("%w: %d fault(s), each above with what to do", errClusterFaults, len(faults)), err)
	}
	_, diffs, err := bus.CheckConsumer(ctx, js, topo, d, cfg.NATS.StreamSettings())
	if err != nil {
		return report(err)
	}
	kv, leaseDiffs, err := bus.CheckLeases(ctx, js, topo, cfg.NATS.StreamSettings())
	if err != nil {
		return report(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return report(fmt.Errorf("read key-value bucket %s: %w", kv.Bucket(), err))
	}
	fmt.Fprintf(out, "streams %s and %s and durable consumer %s take every event kind\n", topo.Stream(), topo.DLQStream(), d.Name)
	fmt.Fprintf(out, "key-value bucket %s holds the leases (ttl %s)\n", kv.Bucket(), st.TTL())
	for _, df := range append(diffs, leaseDiffs...) {
		what := "stream " + df.Stream
		switch {
		case df.Bucket != "":
			what = "key-value bucket " + df.Bucket
		case df.Consumer != "":
			what = "durable consumer " + df.Consumer + " on " + df.Stream
		}
		fmt.Fprintf(out, "%s: %s is %s, these settings say %s\n", what, df.Setting, df.Server, df.Service)
	}
	return report(clusterErr)
}

// streamsUp runs the setup of the JetStream resources and prints one line per resource.
func streamsUp(cmd *cobra.Command) error {
	return withJetStream(cmd, func(ctx context.Context, js jetstream.JetStream, cfg streamsConfig, out io.Writer) error {
		applied, err := bus.Setup(ctx, js, cfg.NATS.Topology(), cfg.NATS.StreamSettings(), cfg.Consumer.DurableConsumer())
		for _, a := range applied {
			fmt.Fprintln(out, a)
		}
		return err
	})
}

// withJetStream runs f with a JetStream context on cfg's NATS, again while an attempt gets no
// answer within streamsRetry's AttemptTimeout (up to streamsTimeout in all), and prints what the
// last attempt wrote to out.
func withJetStream(cmd *cobra.Command, f func(context.Context, jetstream.JetStream, streamsConfig, io.Writer) error) error {
	cfg, err := config.Load[streamsConfig]()
	if err != nil {
		return err
	}
	nc, err := cfg.NATS.Connect("servescope-setup", nats.Timeout(10*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("JetStream context: %w", err)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), streamsTimeout)
	defer cancel()
	var out bytes.Buffer
	err = retry.Do(ctx, streamsRetry, func(ctx context.Context) error {
		out.Reset()
		err := f(ctx, js, cfg, &out)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return retry.Permanent(err)
		}
		return err
	}, func(attempt int, err error, wait time.Duration) {
		fmt.Fprintf(cmd.ErrOrStderr(), "servescope: no answer from JetStream yet (attempt %d: %v); trying again in %s\n", attempt, err, wait.Round(time.Millisecond))
	})
	_, _ = cmd.OutOrStdout().Write(out.Bytes())
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer from JetStream at %s within %s: %w", config.RedactURL(cfg.NATS.URL), streamsTimeout, err)
	}
	return err
}
