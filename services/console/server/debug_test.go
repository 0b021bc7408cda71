package server

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
)

func TestDebugServe(t *testing.T) {
	if os.Getenv("CONSOLE_DEBUG_SERVE") == "" {
		t.Skip()
	}
	conn, ch := testenv.ClickHouse(t)
	now := time.Now().UTC().Truncate(time.Second)
	seed(t, conn, now)
	_, srv := startConsole(t, ch, now, nil)
	fmt.Fprintln(os.Stderr, "URL", srv.URL)
	os.WriteFile("/tmp/console-debug-url", []byte(srv.URL), 0o644)
	time.Sleep(15 * time.Minute)
}
