package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// AlertmanagerVersion is the Alertmanager scripts/dev-services installs (go install
// github.com/prometheus/alertmanager/cmd/alertmanager@AlertmanagerVersion into the cache's bin/).
// Releases from v0.32 on do not build with `go install` (their module has replace directives).
const AlertmanagerVersion = "v0.28.1"

// Alertmanager describes a Prometheus Alertmanager on 127.0.0.1, alone (clustering off). Bin,
// Port, ConfigFile, Config, StorageDir and Log are required.
type Alertmanager struct {
	// Bin is the alertmanager executable (Installed.Alertmanager).
	Bin string
	// Port serves the API (/api/v2/alerts, /api/v2/silences) and /-/ready.
	Port int
	// Config is the alertmanager.yml text, written to ConfigFile by Prepare.
	Config, ConfigFile string
	// StorageDir keeps silences and the notification log: they survive a restart.
	StorageDir string

	// Log receives the server's output; PidFile, when set, records its pid (see proc.Spec).
	Log, PidFile string
	// ReadyTimeout and StopGrace as in proc.Spec (its defaults when 0).
	ReadyTimeout, StopGrace time.Duration
	// OnCrash is called when the server exits on its own (see proc.Spec.OnCrash).
	OnCrash func(error)
	// DieWithCaller ends the server with the caller's process (see proc.Spec.DieWithCaller).
	DieWithCaller bool
}

// URL is the base URL, http://127.0.0.1:<Port>.
func (a Alertmanager) URL() string { return "http://127.0.0.1:" + strconv.Itoa(a.Port) }

// Healthy succeeds when /-/ready answers 200: the configuration is loaded and the API serves.
func (a Alertmanager) Healthy(ctx context.Context) error {
	_, err := httpGet(ctx, a.URL()+"/-/ready")
	return err
}

// Args are alertmanager's arguments. An empty --cluster.listen-address turns the gossip
// cluster off, so no second port is taken and a lone server never waits for peers.
func (a Alertmanager) Args() []string {
	return []string{
		"--config.file=" + a.ConfigFile,
		"--storage.path=" + a.StorageDir,
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(a.Port),
		"--cluster.listen-address=",
		"--log.level=info",
	}
}

func (a Alertmanager) check() error {
	switch {
	case a.Bin == "" || a.ConfigFile == "" || a.Config == "" || a.StorageDir == "" || a.Log == "":
		return errors.New("servers: Alertmanager needs Bin, Config, ConfigFile, StorageDir and Log")
	case a.Port <= 0:
		return fmt.Errorf("servers: Alertmanager port %d: want it set", a.Port)
	}
	return nil
}

// Prepare creates the storage directory and writes the config file.
func (a Alertmanager) Prepare() error {
	if err := a.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(a.StorageDir, 0o755); err != nil {
		return fmt.Errorf("create the Alertmanager storage: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(a.ConfigFile), 0o755); err != nil {
		return fmt.Errorf("create the Alertmanager config directory: %w", err)
	}
	if err := os.WriteFile(a.ConfigFile, []byte(a.Config), 0o644); err != nil {
		return fmt.Errorf("write the Alertmanager config: %w", err)
	}
	return nil
}

// Spec is the process that runs the server, ready once Healthy succeeds.
func (a Alertmanager) Spec() proc.Spec {
	return proc.Spec{
		Name:          "alertmanager",
		Path:          a.Bin,
		Args:          a.Args(),
		Log:           a.Log,
		PidFile:       a.PidFile,
		Ready:         a.Healthy,
		ReadyTimeout:  a.ReadyTimeout,
		StopGrace:     a.StopGrace,
		OnCrash:       a.OnCrash,
		DieWithCaller: a.DieWithCaller,
	}
}

// AlertmanagerServer is an Alertmanager the caller supervises: Start, Stop, Kill and Restart keep
// its port and storage.
type AlertmanagerServer struct {
	*proc.Process
	cfg Alertmanager
}

// NewAlertmanager prepares a (see Alertmanager.Prepare) and returns its server, not started yet.
func NewAlertmanager(a Alertmanager) (*AlertmanagerServer, error) {
	p, err := newProcess(a)
	if err != nil {
		return nil, err
	}
	return &AlertmanagerServer{Process: p, cfg: a}, nil
}

// Config returns the server's description.
func (s *AlertmanagerServer) Config() Alertmanager { return s.cfg }

// URL is the base URL, http://127.0.0.1:<port>.
func (s *AlertmanagerServer) URL() string { return s.cfg.URL() }
