package testenv

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// binaries holds one build per package path for the test process.
var binaries sync.Map // package path → func() (string, error)

// Binary builds the Go package pkg (an import path of a main package, e.g.
// "github.com/servescope/servescope/services/detector") once per test process, without the race
// detector, as a deployment runs it, and returns the executable's path. A failed build fails the
// test.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	build, _ := binaries.LoadOrStore(pkg, sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "servescope-bin-")
		if err != nil {
			return "", err
		}
		bin := filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
		return bin, nil
	}))
	bin, err := build.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// MetricValue reads the Prometheus text exposition at url (a /metrics endpoint) and returns the
// value of the sample written exactly as series (name and labels in the order the server writes
// them, e.g. `servescope_detector_lease_held` or `x_total{engine="sim",result="ok"}`), or -1 when
// the endpoint does not answer or has no such sample.
func MetricValue(url, series string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
				return v
			}
		}
	}
	return -1
}
