package testenv

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/servescope/servescope/dev/servers"
)

// AlertmanagerServer is a private Prometheus Alertmanager on 127.0.0.1 (clustering off). Its port
// and storage (silences, notification log) stay the same across Stop/Kill and Start.
type AlertmanagerServer struct {
	t testing.TB
	s *servers.AlertmanagerServer
}

// StartAlertmanager starts a private Alertmanager with the configuration config (alertmanager.yml
// text) on a free loopback port, its storage under t.TempDir(), and returns once /-/ready answers
// 200. A missing binary ends the test as an unreachable server does (see Unavailable):
// scripts/dev-services up installs it.
func StartAlertmanager(t testing.TB, config string) *AlertmanagerServer {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := servers.RepoCacheDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	in := servers.InstalledIn(cache)
	if err := in.CheckAlertmanager(); err != nil {
		Unavailable(t, "%v", err)
	}
	dir := t.TempDir()
	a := &AlertmanagerServer{t: t}
	onFreePorts(t, 1, func(ctx context.Context, ports []int) error {
		s, err := servers.NewAlertmanager(servers.Alertmanager{
			Bin:        in.Alertmanager,
			Port:       ports[0],
			Config:     config,
			ConfigFile: filepath.Join(dir, "alertmanager.yml"),
			StorageDir: filepath.Join(dir, "data"),
			Log:        filepath.Join(dir, "alertmanager.log"),
			// A test binary killed by its timeout leaves no server behind.
			DieWithCaller: true,
		})
		if err != nil {
			return err
		}
		a.s = s
		supervise(t, s.Process)
		return s.Start(ctx)
	})
	return a
}

// URL is the base URL, http://127.0.0.1:<port>; it stays valid across restarts.
func (a *AlertmanagerServer) URL() string { return a.s.URL() }

// Start (re)starts the server on the same port and storage and waits until it is ready.
func (a *AlertmanagerServer) Start() { a.t.Helper(); start(a.t, a.s.Process) }

// Stop sends SIGTERM and waits for the process to exit. Stopping a stopped server does nothing.
func (a *AlertmanagerServer) Stop() { a.t.Helper(); stop(a.t, a.s.Process) }

// Kill sends SIGKILL, as a crash would, and waits for the process to exit.
func (a *AlertmanagerServer) Kill() { a.t.Helper(); kill(a.t, a.s.Process) }
