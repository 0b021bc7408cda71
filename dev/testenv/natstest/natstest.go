// Package natstest runs a NATS server with JetStream inside the test process, as nats.go's own
// tests do, for a test that needs a server of its own that it neither stops nor kills: a server
// that requires authentication or TLS, say. It needs no installed program, starts in
// milliseconds and goes away with the test. A test that stops, kills or restarts its server
// needs a real process instead: testenv.StartNATS.
//
// It is a package of its own so that only the tests using it link nats-server.
package natstest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/servescope/servescope/dev/testenv"
)

// readyTimeout bounds the wait for the server's listeners; it starts in milliseconds, the rest
// is room for a loaded machine.
const readyTimeout = 30 * time.Second

// Server is a NATS server running inside the test process.
type Server struct {
	srv *server.Server
}

// Start runs a server with JetStream (store under t.TempDir()) on a free loopback port, without
// authentication, until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartAuth(t, testenv.NATSAuth{})
}

// StartAuth runs a server like Start that requires auth (see testenv.NATSAuth) from its clients.
// The settings go through nats-server's own config parser, as a deployment's config file would.
func StartAuth(t testing.TB, auth testenv.NATSAuth) *Server {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(auth.Config()), 0o600); err != nil {
		t.Fatalf("write the NATS config: %v", err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("read the NATS config: %v", err)
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.JetStream, opts.StoreDir = true, filepath.Join(dir, "jetstream")
	// The fixed JetStream budget of dev/servers' NATS (MaxFileStoreBytes), not 75% of the free
	// disk, which refused this test's streams (err 10047) on a machine with 16 GB free.
	opts.JetStreamMaxStore = 1 << 40
	opts.ServerName = "natstest-" + strconv.Itoa(os.Getpid())
	// The server's log would go to stderr; its signal handlers would take the test binary's.
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("create the NATS server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(readyTimeout) {
		t.Fatalf("the in-process NATS server did not take connections within %s", readyTimeout)
	}
	if !srv.JetStreamEnabled() {
		t.Fatal("the in-process NATS server runs without JetStream")
	}
	return &Server{srv: srv}
}

// URL is the client URL, nats://127.0.0.1:<port>.
func (s *Server) URL() string { return "nats://" + s.srv.Addr().String() }

// TLSURL is the client URL with the tls:// scheme, for a server started with a PKI.
func (s *Server) TLSURL() string { return "tls://" + s.srv.Addr().String() }
