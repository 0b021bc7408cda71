package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/chstore"
)

// imageVersion returns the release an image tag names: "nats:2.15.2-alpine" → "2.15.2".
func imageVersion(t *testing.T, image string) string {
	t.Helper()
	m := regexp.MustCompile(`:v?(\d+\.\d+\.\d+)`).FindStringSubmatch(image)
	if m == nil {
		t.Fatalf("image %q names no major.minor.patch release", image)
	}
	return m[1]
}

// goModVersion returns the version go.mod requires for module path (directly or indirectly).
func goModVersion(t *testing.T, root, path string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(path) + `\s+v(\S+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatalf("go.mod does not require %s", path)
	}
	return string(m[1])
}

// TestImagesAreTheTestedVersions: the NATS and ClickHouse images users run are the releases the
// tests run against. NATS: the nats-server module go.mod pins (scripts/dev-services builds the
// development server from it and tests start it in-process), and the version the shared server
// reports. ClickHouse: the major.minor.patch the development server reports as version() (the
// engine of the chdb package scripts/dev-services pins; its build number is chdb's, not a server
// image's, so the fourth part is not compared).
func TestImagesAreTheTestedVersions(t *testing.T) {
	c, root := load(t)

	natsImage := imageVersion(t, c.Services["nats"].Image)
	if mod := goModVersion(t, root, "github.com/nats-io/nats-server/v2"); natsImage != mod {
		t.Errorf("docker-compose.yml runs NATS %s, go.mod pins nats-server %s: make them agree", natsImage, mod)
	}
	if served := testenv.NATS(t).ConnectedServerVersion(); natsImage != served {
		t.Errorf("docker-compose.yml runs NATS %s, the development server is %s", natsImage, served)
	}

	chImage := imageVersion(t, c.Services["clickhouse"].Image)
	cfg := testenv.ClickHouseConfig(t)
	cfg.Database = "default"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := chstore.Open(ctx, cfg)
	if err != nil {
		testenv.Unavailable(t, "ClickHouse: %v", err)
	}
	defer conn.Close()
	v, err := conn.ServerVersion()
	if err != nil {
		t.Fatalf("ClickHouse server version: %v", err)
	}
	served := fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	if chImage != served {
		t.Errorf("docker-compose.yml runs ClickHouse %s, the development server is %s (%s)", chImage, served, v)
	}
}
