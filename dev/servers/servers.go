// Package servers describes the NATS and ClickHouse servers of the development harness and runs
// them through dev/proc: nats-server, built from the github.com/nats-io/nats-server/v2 version
// pinned in go.mod, and the ClickHouse engine of libchdb.so run by the chlaunch launcher
// (deploy/dev/chlaunch), both installed by scripts/dev-services under its cache directory. The
// same script installs a Prometheus Alertmanager ([AlertmanagerVersion]), which tests of alert
// delivery run privately ([NewAlertmanager]).
//
// One description serves every user: the tests (dev/testenv) and the chaos suite
// run private servers they supervise ([NewNATS], [NewClickHouse]: a [proc.Process] that can be
// stopped, killed and started again on the same ports and data), and scripts/dev-services runs
// the shared dev servers detached from the same [NATS.Spec] and [ClickHouse.Spec]. Every server
// listens on 127.0.0.1 only.
package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/servescope/servescope/dev/proc"
)

// CacheDirEnv names the variable that moves scripts/dev-services' cache directory away from
// .cache at the repository root.
const CacheDirEnv = "SERVESCOPE_DEV_CACHE_DIR"

// CacheDir is scripts/dev-services' cache directory for the repository at root: $CacheDirEnv
// when set, else root/.cache.
func CacheDir(root string) string {
	if v := os.Getenv(CacheDirEnv); v != "" {
		return v
	}
	return filepath.Join(root, ".cache")
}

// RepoCacheDir is the cache directory (see CacheDir) of the repository holding dir: the nearest
// directory at or above dir with a go.mod is its root. Tests use it with their working directory,
// which go test sets to their package's directory.
func RepoCacheDir(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return CacheDir(d), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("find the repository root: no go.mod at or above %s", dir)
		}
	}
}

// Installed names the programs scripts/dev-services installs under a cache directory.
type Installed struct {
	NATSServer string // bin/nats-server
	Chlaunch   string // bin/chlaunch
	Libchdb    string // the engine, from the npm package @chdb/lib-linux-x64-gnu
	// Alertmanager is bin/alertmanager (AlertmanagerVersion). Check leaves it out: only the
	// tests of alert delivery need it, and they call CheckAlertmanager.
	Alertmanager string
}

// InstalledIn returns where scripts/dev-services installs the programs under cacheDir.
func InstalledIn(cacheDir string) Installed {
	return Installed{
		NATSServer:   filepath.Join(cacheDir, "bin", "nats-server"),
		Chlaunch:     filepath.Join(cacheDir, "bin", "chlaunch"),
		Libchdb:      filepath.Join(cacheDir, "chdb", "node_modules", "@chdb", "lib-linux-x64-gnu", "libchdb.so"),
		Alertmanager: filepath.Join(cacheDir, "bin", "alertmanager"),
	}
}

// ErrNotInstalled is wrapped by Check's error when a program is missing.
var ErrNotInstalled = errors.New("not installed (scripts/dev-services up installs it)")

// Check fails, naming the first missing program, unless all of them are there.
func (in Installed) Check() error {
	for _, path := range []string{in.NATSServer, in.Chlaunch, in.Libchdb} {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", path, ErrNotInstalled)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// CheckAlertmanager fails unless the Alertmanager is installed.
func (in Installed) CheckAlertmanager() error {
	if _, err := os.Stat(in.Alertmanager); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", in.Alertmanager, ErrNotInstalled)
	} else if err != nil {
		return err
	}
	return nil
}

// newProcess prepares d, a server's description, and returns the process that runs it.
func newProcess(d interface {
	Prepare() error
	Spec() proc.Spec
}) (*proc.Process, error) {
	if err := d.Prepare(); err != nil {
		return nil, err
	}
	return proc.New(d.Spec())
}

// httpGet returns the body of a 200 answer to a GET of rawURL.
func httpGet(ctx context.Context, rawURL string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", fmt.Errorf("build request for %s: %w", rawURL, err)
	}
	// No keep-alive: a pooled connection to a server since killed would fail the next check.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("read the answer to GET %s: %w", rawURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", rawURL, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}
