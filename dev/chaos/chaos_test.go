package chaos

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
)

// TestShortChaosRun is scripts/chaos with 5 s outages, 3 s of steady traffic between the faults
// and the detector's windows divided by 20: every fault, the burst and the whole ledger, in
// about 90 s. It builds the services into
// a temporary directory and runs them against private NATS and ClickHouse servers on ports
// 19740–19752.
func TestShortChaosRun(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if err := servers.InstalledIn(servers.CacheDir(root)).Check(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(os.PathSeparator), "./services/servescope", "./services/consumer",
		"./sim/vllmsim", "./services/collector", "./services/gateway", "./sim/ragdemo", "./services/detector")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the services: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var progress strings.Builder
	ledger, err := Run(ctx, Options{Root: root, BinDir: bin, WorkDir: t.TempDir(), PortBase: 19740,
		Outage: 5 * time.Second, Steady: 3 * time.Second, RuleScale: 20, Out: &progress})
	if err != nil {
		t.Fatalf("chaos run: %v\nprogress:\n%s", err, progress.String())
	}
	var out strings.Builder
	ledger.Print(&out)
	if len(ledger.Gaps) > 0 {
		t.Errorf("the ledger has %d gap(s):\n%s\nprogress:\n%s", len(ledger.Gaps), out.String(), progress.String())
	}
	for _, want := range []string{"lost: 0, duplicated: 0", "RESULT: no gap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("ledger lacks %q:\n%s", want, out.String())
		}
	}
}
