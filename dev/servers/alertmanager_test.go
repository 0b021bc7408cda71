package servers_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testenv"
)

func alertmanagerConfig(t *testing.T, in servers.Installed, config string) servers.Alertmanager {
	t.Helper()
	if err := in.CheckAlertmanager(); err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	dir := t.TempDir()
	return servers.Alertmanager{
		Bin: in.Alertmanager, Port: freePort(t), Config: config,
		ConfigFile: filepath.Join(dir, "alertmanager.yml"), StorageDir: filepath.Join(dir, "data"),
		Log: filepath.Join(dir, "alertmanager.log"), DieWithCaller: true,
	}
}

// The installed Alertmanager is the pinned version, serves /-/ready once its configuration is
// loaded, and a configuration it refuses fails the start with Alertmanager's own reason.
func TestAlertmanagerStartsAndRefusesABadConfig(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	in := installed(t)
	good := alertmanagerConfig(t, in, "route: {receiver: none}\nreceivers: [{name: none}]\n")
	out, err := exec.CommandContext(ctx, "go", "version", "-m", good.Bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", good.Bin, err)
	}
	if !strings.Contains(string(out), "github.com/prometheus/alertmanager\t"+servers.AlertmanagerVersion) {
		t.Errorf("%s is not alertmanager %s:\n%s", good.Bin, servers.AlertmanagerVersion, out)
	}
	// On a fresh port again when another process took the one picked before it bound it.
	_, err = proc.OnFreePorts(ctx, 1, func(ctx context.Context, ports []int) error {
		good.Port = ports[0]
		s, err := servers.NewAlertmanager(good)
		if err != nil {
			return err
		}
		t.Cleanup(func() { _ = s.Kill(context.Background()) })
		return s.Start(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := good.Healthy(ctx); err != nil {
		t.Fatalf("started but not ready: %v", err)
	}

	bad, err := servers.NewAlertmanager(alertmanagerConfig(t, in, "route: {receiver: missing}\nreceivers: [{name: none}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Start(ctx)
	if err == nil {
		_ = bad.Kill(ctx)
		t.Fatal("started with a route to an undefined receiver")
	}
	if !strings.Contains(err.Error(), "undefined receiver") || !strings.Contains(err.Error(), "missing") {
		t.Errorf("error does not say why: %v", err)
	}
}
