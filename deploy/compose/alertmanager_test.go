package compose

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/servescope/servescope/dev/testenv"
)

// exampleLineRE matches a commented-out line of YAML in deploy/alertmanager/alertmanager.yml (a key
// or a list item after "# "); prose comments start with a capital or have no key.
var exampleLineRE = regexp.MustCompile(`^(\s*)# (\s*(?:- )?[a-z_]+:.*)$`)

// The Alertmanager configuration shipped for compose loads in the Alertmanager version the compose
// file runs, as shipped and with every commented example (routes; webhook, Slack and PagerDuty
// receivers) uncommented: a server that cannot load its configuration never becomes ready.
func TestAlertmanagerConfigLoads(t *testing.T) {
	c, root := load(t)
	if img := c.Services["alertmanager"].Image; img != "prom/alertmanager:v0.28.1" {
		t.Errorf("alertmanager image %q: the test runs v0.28.1 (dev/servers.AlertmanagerVersion)", img)
	}
	if got := c.Services["detector"].Environment["DETECTOR_ALERTMANAGER_URLS"]; got != "http://alertmanager:9093" {
		t.Errorf("detector's DETECTOR_ALERTMANAGER_URLS = %q, want the compose alertmanager", got)
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "alertmanager", "alertmanager.yml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	uncommented := 0
	for i, l := range lines {
		if m := exampleLineRE.FindStringSubmatch(l); m != nil {
			lines[i] = m[1] + m[2]
			uncommented++
		}
	}
	if uncommented < 15 {
		t.Fatalf("uncommented %d example lines; want the routes and the three receivers", uncommented)
	}
	examples := strings.Join(lines, "\n")
	for _, want := range []string{"webhook_configs:", "slack_configs:", "pagerduty_configs:", "\n  routes:"} {
		if !strings.Contains(examples, want) {
			t.Errorf("examples lack %q", want)
		}
	}
	t.Run("shipped", func(t *testing.T) { testenv.StartAlertmanager(t, string(raw)) })
	t.Run("examples", func(t *testing.T) { testenv.StartAlertmanager(t, examples) })
}
