package benchkit

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/servescope/servescope/internal/bus"
	"github.com/servescope/servescope/internal/config"
)

// Streams is a benchmark's own piece of the NATS of SERVESCOPE_NATS_URL: a subject prefix no one
// else uses and the streams under it, created as the setup step creates them and deleted by
// Close, so a bench never reads or fills the streams of the services or of another bench.
type Streams struct {
	// NATS is the loaded configuration with the bench's prefix and stream size: hand it (or its
	// SERVESCOPE_SUBJECT_PREFIX and SERVESCOPE_STREAM_MAX_BYTES) to what the bench runs.
	NATS     config.NATS
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Topology bus.Topology

	spools []string
}

// OpenStreams loads SERVESCOPE_NATS_*, sets the subject prefix to prefix and, when maxBytes is
// positive, the events stream's max_bytes to it (JetStream reserves max_bytes against the
// server's storage, and a bench needs far less than the 10 GiB default), connects as client name
// and creates the streams and the durables ds with the setup step's code (bus.Setup, as
// `servescope migrate up` runs it). Its JetStream client buffers up to 4,096 async publishes.
// On error nothing is left behind.
func OpenStreams(ctx context.Context, name, prefix string, maxBytes int64, ds ...bus.Durable) (*Streams, error) {
	cfg, err := config.Load[config.NATS]()
	if err != nil {
		return nil, err
	}
	cfg.SubjectPrefix = prefix
	if maxBytes > 0 {
		cfg.StreamMaxBytes = maxBytes
	}
	nc, err := cfg.Connect(name)
	if err != nil {
		return nil, fmt.Errorf("NATS (start it with scripts/dev-services up): %w", err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream: %w", err)
	}
	s := &Streams{NATS: cfg, Conn: nc, JS: js, Topology: cfg.Topology()}
	if err := s.Setup(ctx, ds...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Setup runs the setup step's code again, with the durables ds: how a bench sets up a durable
// consumer per configuration it measures.
func (s *Streams) Setup(ctx context.Context, ds ...bus.Durable) error {
	if _, err := bus.Setup(ctx, s.JS, s.Topology, s.NATS.StreamSettings(), ds...); err != nil {
		return fmt.Errorf("set up the streams of prefix %s: %w", s.NATS.SubjectPrefix, err)
	}
	return nil
}

// Spool makes an empty directory for the on-disk spool of a publisher (schema/publish) writing
// to these streams, named after name; Close removes it.
func (s *Streams) Spool(name string) (string, error) {
	dir, err := os.MkdirTemp("", name+"-spool-")
	if err != nil {
		return "", fmt.Errorf("spool directory: %w", err)
	}
	s.spools = append(s.spools, dir)
	return dir, nil
}

// Close deletes the events and dead-letter streams and the lease bucket the setup made (within 30
// seconds, whatever became of the bench's context), closes the connection and removes the spool
// directories.
func (s *Streams) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.JS.DeleteStream(ctx, s.Topology.Stream())
	_ = s.JS.DeleteStream(ctx, s.Topology.DLQStream())
	_ = s.JS.DeleteKeyValue(ctx, s.Topology.LeaseBucket())
	s.Conn.Close()
	for _, dir := range s.spools {
		_ = os.RemoveAll(dir)
	}
}
