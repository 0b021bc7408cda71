package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/internal/config"
	"github.com/servescope/servescope/services/console/server"
)

// TestConsoleService checks the demo's console settings are ones the console accepts: the demo's
// database, loopback, its token, and the demo's scaled rules.
func TestConsoleService(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "console-password")
	if err := os.WriteFile(pwFile, []byte("pw-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := Stack{Ports: PortsFrom(DefaultPortBase), Database: "servescope_demo", StateDir: t.TempDir(),
		Dev: Dev{ClickHouseAddr: "127.0.0.1:9000", ConsolePasswordFile: pwFile}, ConsoleToken: "demo-console-token"}
	svc := s.Console()
	for k, v := range svc.Env {
		t.Setenv(k, v)
	}
	cfg, err := config.Load[server.Config]()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.ClickHouse.Database != s.Database || cfg.Auth != server.AuthToken || cfg.Token != s.ConsoleToken ||
		cfg.ListenAddr != "127.0.0.1:19609" || !strings.HasSuffix(cfg.RulesDir, "/rules") {
		t.Errorf("console settings %+v", cfg)
	}
	// It reads through the read-only account, as a deployment's console does.
	if opts, err := cfg.ClickHouse.Options(); err != nil || cfg.ClickHouse.User != servers.DemoConsoleUser || opts.Auth.Password != "pw-123" {
		t.Errorf("console's ClickHouse account %q (password from %q), want %s with the dev server's password: %v", cfg.ClickHouse.User, cfg.ClickHouse.PasswordFile, servers.DemoConsoleUser, err)
	}
	if got := s.ConsoleURL(); got != "http://127.0.0.1:19609/" || strings.Contains(got, s.ConsoleToken) {
		t.Errorf("console URL %q", got)
	}
}
