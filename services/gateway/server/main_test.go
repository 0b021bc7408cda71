package server_test

import (
	"os"
	"testing"
)

// TestMain keeps the test streams small: JetStream reserves each stream's max_bytes against the
// server's storage, and the setup step's default of 10 GiB per stream exhausts a server when
// several tests run in parallel. The tests on a private server set their streams up
// (testenv.Provision) with the SERVESCOPE_STREAM_MAX_BYTES of testenv.NATSConfig.
func TestMain(m *testing.M) {
	if os.Getenv("SERVESCOPE_STREAM_MAX_BYTES") == "" {
		os.Setenv("SERVESCOPE_STREAM_MAX_BYTES", "268435456")
	}
	os.Exit(m.Run())
}
