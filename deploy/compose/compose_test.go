package compose

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     any               `yaml:"command"`
	Entrypoint  any               `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Profiles    []string          `yaml:"profiles"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Networks map[string]struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
	Restart  string `yaml:"restart"`
	Hostname string `yaml:"hostname"`
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

func load(t *testing.T) (composeFile, string) {
	t.Helper()
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse (anchors and merges included): %v", err)
	}
	return c, root
}

func argv(v any) []string {
	switch x := v.(type) {
	case string:
		return strings.Fields(x)
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = strings.TrimSpace(strings.ReplaceAll(toString(e), "\n", " "))
		}
		return out
	}
	return nil
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// binary returns the servescope binary a service runs (command[0]), or "" for third-party images.
func binary(s service) string {
	if s.Build == nil {
		return ""
	}
	if a := argv(s.Command); len(a) > 0 {
		return a[0]
	}
	return ""
}

// binaryDir returns the package directory of a binary the image holds: a production service under
// services/ or a stand-in under sim/ (deploy/Dockerfile builds both); "" when neither has it.
func binaryDir(root, bin string) string {
	for _, parent := range []string{"services", "sim"} {
		dir := filepath.Join(root, parent, bin)
		if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
			return dir
		}
	}
	return ""
}

// envVars returns every environment variable a binary's configuration reads: the `env` struct
// tags in its package tree and in the packages it shares with the other services, with the
// prefix of any env.Options{Prefix: "..."} in its own package applied to its own tags.
func envVars(t *testing.T, root, bin string) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	scan := func(dir string, own bool) {
		prefix := ""
		var tags []string
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.Field:
					if x.Tag != nil {
						tag, _ := strconv.Unquote(x.Tag.Value)
						if v := reflect.StructTag(tag).Get("env"); v != "" {
							tags = append(tags, strings.Split(v, ",")[0])
						}
					}
				case *ast.KeyValueExpr:
					if id, ok := x.Key.(*ast.Ident); ok && id.Name == "Prefix" && own {
						if lit, ok := x.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							prefix, _ = strconv.Unquote(lit.Value)
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatalf("scan %s: %v", dir, err)
		}
		for _, tg := range tags {
			vars[prefix+tg] = true
		}
	}
	scan(binaryDir(root, bin), true)
	scan(filepath.Join(root, "internal", "config"), false)
	return vars
}

// TestEnvironmentIsRead checks that every variable given to a servescope service is one its
// configuration reads: a misspelt variable would be silently ignored in production.
func TestEnvironmentIsRead(t *testing.T) {
	c, root := load(t)
	checked := 0
	for name, s := range c.Services {
		bin := binary(s)
		if bin == "" {
			continue
		}
		if binaryDir(root, bin) == "" {
			t.Errorf("service %s runs %q, which is not a binary under services/ or sim/", name, bin)
			continue
		}
		known := envVars(t, root, bin)
		if len(known) == 0 {
			t.Errorf("service %s: found no env tags for %s", name, bin)
		}
		for k := range s.Environment {
			checked++
			if !known[k] {
				t.Errorf("service %s sets %s, which %s does not read", name, k, bin)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no environment checked")
	}
}

var hostPortRE = regexp.MustCompile(`(?:^|//|\s|^)([a-z][a-z0-9_-]*):(\d{2,5})\b`)

// containerPorts lists the ports a service listens on inside the network: published container
// ports, the port of its *_LISTEN* / *_ADDR variables, a --port flag, and the fixed ports of the
// third-party images.
func containerPorts(s service) map[string]bool {
	ports := map[string]bool{}
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		ports[parts[len(parts)-1]] = true
	}
	for k, v := range s.Environment {
		if strings.Contains(k, "LISTEN") || strings.HasSuffix(k, "_ADDR") {
			if i := strings.LastIndex(v, ":"); i >= 0 {
				ports[v[i+1:]] = true
			}
		}
	}
	cmd := strings.Join(argv(s.Command), " ")
	for _, m := range regexp.MustCompile(`--port[ =](\d+)`).FindAllStringSubmatch(cmd, -1) {
		ports[m[1]] = true
	}
	// A NATS cluster node's route port.
	for _, m := range regexp.MustCompile(`--cluster[ =]nats://[^ ]*:(\d+)`).FindAllStringSubmatch(cmd, -1) {
		ports[m[1]] = true
	}
	switch {
	case strings.HasPrefix(s.Image, "nats:"):
		ports["4222"], ports["8222"] = true, true
	case strings.HasPrefix(s.Image, "clickhouse/"):
		ports["9000"], ports["8123"] = true, true
	}
	return ports
}

// TestAddressesAgree checks that every host:port a service is told to reach names a service (or a
// network alias) of this file listening on that port.
func TestAddressesAgree(t *testing.T) {
	c, _ := load(t)
	listeners := map[string][]map[string]bool{}
	for name, s := range c.Services {
		p := containerPorts(s)
		listeners[name] = append(listeners[name], p)
		for _, n := range s.Networks {
			for _, a := range n.Aliases {
				listeners[a] = append(listeners[a], p)
			}
		}
	}
	found := 0
	for name, s := range c.Services {
		values := []string{strings.Join(argv(s.Command), " ")}
		for _, v := range s.Environment {
			values = append(values, v)
		}
		for _, v := range values {
			for _, m := range hostPortRE.FindAllStringSubmatch(v, -1) {
				host, port := m[1], m[2]
				targets, ok := listeners[host]
				if !ok {
					continue // not a compose host (e.g. a scheme)
				}
				found++
				for _, p := range targets {
					if !p[port] {
						t.Errorf("service %s reaches %s:%s, but %s listens on %v", name, host, port, host, keys(p))
					}
				}
			}
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
		}
	}
	if found < 6 {
		t.Errorf("only %d service addresses found; the parser is missing them", found)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var pinnedRE = regexp.MustCompile(`^[a-z0-9./_-]+:(v?\d+\.\d+\.\d+[a-z0-9.+-]*|\$\{[A-Z_]+:-v?\d+\.\d+\.\d+\})$`)

// TestImagesPinned checks every image names an exact version, never latest or a moving branch.
func TestImagesPinned(t *testing.T) {
	c, _ := load(t)
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("service %s has no image", name)
			continue
		}
		if !pinnedRE.MatchString(s.Image) {
			t.Errorf("service %s: image %q is not pinned to an exact version", name, s.Image)
		}
	}
	if img := c.Services["clickhouse"].Image; !regexp.MustCompile(`:(2[5-9]|[3-9]\d)\.`).MatchString(img) {
		t.Errorf("clickhouse image %q is older than 25.8", img)
	}
}

// TestStateOnVolumes checks that what must survive a container restart sits on a named volume:
// NATS's JetStream store, ClickHouse's data, the spools, and the engine's log.
func TestStateOnVolumes(t *testing.T) {
	c, _ := load(t)
	mounted := func(svc, path string) bool {
		for _, v := range c.Services[svc].Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && (parts[1] == path || strings.HasPrefix(path, parts[1]+"/")) {
				if _, named := c.Volumes[parts[0]]; named {
					return true
				}
			}
		}
		return false
	}
	sd := ""
	args := argv(c.Services["nats"].Command)
	for i, a := range args {
		if (a == "-sd" || a == "--store_dir") && i+1 < len(args) {
			sd = args[i+1]
		}
	}
	checks := []struct{ svc, path string }{
		{"nats", sd},
		{"clickhouse", "/var/lib/clickhouse"},
		{"gateway", c.Services["gateway"].Environment["GATEWAY_SPOOL_DIR"]},
		{"collector", c.Services["collector"].Environment["COLLECTOR_SPOOL_DIR"]},
		{"collector", filepath.Dir(c.Services["collector"].Environment["COLLECTOR_LOG_FILES"])},
		{"vllm", "/var/log/vllm"},
		{"vllmsim", filepath.Dir(c.Services["vllmsim"].Environment["VLLMSIM_LOG_FILE"])},
	}
	for _, ch := range checks {
		if ch.path == "" || ch.path == "." {
			t.Errorf("%s: no path configured for its state", ch.svc)
			continue
		}
		if !mounted(ch.svc, ch.path) {
			t.Errorf("%s: %s is not on a named volume", ch.svc, ch.path)
		}
	}
}

var secretKeyRE = regexp.MustCompile(`PASSWORD|TOKEN|SECRET`)

// TestNoSecretsInFile checks every secret comes from the environment (.env) or a file, with no
// value written into the compose file.
func TestNoSecretsInFile(t *testing.T) {
	c, root := load(t)
	for name, s := range c.Services {
		for k, v := range s.Environment {
			if secretKeyRE.MatchString(k) && !strings.HasSuffix(k, "_FILE") && !regexp.MustCompile(`^\$\{[A-Z_]+(:?[-?][^}]*)?\}$`).MatchString(v) {
				t.Errorf("service %s: %s has a literal value; take it from the environment", name, k)
			}
			if secretKeyRE.MatchString(k) && regexp.MustCompile(`:-[^}]+\}$`).MatchString(v) {
				t.Errorf("service %s: %s has a default value written in the file", name, k)
			}
		}
	}
	ex, err := os.ReadFile(filepath.Join(root, "deploy", "env.example"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ex), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && secretKeyRE.MatchString(k) && strings.TrimSpace(v) != "" {
			t.Errorf("deploy/env.example ships a value for %s", k)
		}
	}
}

// TestServicesAndProfiles checks the deployment's shape: every part of the pipeline, vllm only
// in profile gpu and vllmsim only in profile sim, both reachable as "engine", healthchecks on the
// long-running services and start-up ordering on health or completion.
func TestServicesAndProfiles(t *testing.T) {
	c, _ := load(t)
	for _, name := range []string{"nats", "clickhouse", "migrate", "gateway", "consumer", "collector", "detector", "vllm", "vllmsim"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	if p := c.Services["vllm"].Profiles; len(p) != 1 || p[0] != "gpu" {
		t.Errorf("vllm profiles = %v, want [gpu]", p)
	}
	if p := c.Services["vllmsim"].Profiles; len(p) != 1 || p[0] != "sim" {
		t.Errorf("vllmsim profiles = %v, want [sim]", p)
	}
	for _, engine := range []string{"vllm", "vllmsim"} {
		found := false
		for _, n := range c.Services[engine].Networks {
			for _, a := range n.Aliases {
				found = found || a == "engine"
			}
		}
		if !found {
			t.Errorf("%s is not reachable as engine", engine)
		}
	}
	vllmCmd := strings.Join(argv(c.Services["vllm"].Command), " ")
	for _, flag := range []string{"--otlp-traces-endpoint collector:4317", "--enable-request-id-headers", "--max-model-len", "--gpu-memory-utilization", "/var/log/vllm/"} {
		if !strings.Contains(vllmCmd, flag) {
			t.Errorf("vllm command lacks %q", flag)
		}
	}
	for name, s := range c.Services {
		if name == setupOf(s) {
			if s.Restart != "no" {
				t.Errorf("migrate is a one-shot job; restart = %q", s.Restart)
			}
			continue
		}
		if s.Healthcheck == nil || len(s.Healthcheck.Test) == 0 {
			t.Errorf("service %s has no healthcheck", name)
		}
		for dep, d := range s.DependsOn {
			if d.Condition != "service_healthy" && d.Condition != "service_completed_successfully" {
				t.Errorf("service %s depends on %s without a health or completion condition", name, dep)
			}
		}
	}
}

// TestSetupRunsFirst checks that the one-shot migrate service is the setup step of the whole
// deployment — `servescope migrate up`, which applies the ClickHouse migrations and creates the
// JetStream streams and the consumer's durable consumer — that it waits for NATS and ClickHouse,
// and that every service using the streams or the database starts only once it completed: the
// services check those resources and never create them. The durable consumer is sized from the
// consumer's CONSUMER_* settings, so the setup must be given the same values as the consumer.
func TestSetupRunsFirst(t *testing.T) {
	c, _ := load(t)
	for _, setup := range []struct {
		name    string
		servers []string
	}{
		{"migrate", []string{"nats", "clickhouse"}},
		{"cluster-migrate", append(clusterServices(c, isNATS), clusterServices(c, isClickHouse)...)},
	} {
		m, ok := c.Services[setup.name]
		if !ok {
			t.Fatalf("no %s service", setup.name)
		}
		if got := strings.Join(argv(m.Command), " "); got != "servescope migrate up" {
			t.Errorf("%s runs %q, want servescope migrate up", setup.name, got)
		}
		for _, dep := range setup.servers {
			if d, ok := m.DependsOn[dep]; !ok || d.Condition != "service_healthy" {
				t.Errorf("%s does not wait for %s to be healthy: %+v", setup.name, dep, m.DependsOn)
			}
		}
		if m.Environment["SERVESCOPE_NATS_URL"] == "" || m.Environment["SERVESCOPE_CLICKHOUSE_ADDR"] == "" {
			t.Errorf("%s is not given both NATS and ClickHouse: %v", setup.name, m.Environment)
		}
	}
	users := 0
	for name, s := range c.Services {
		if name == setupOf(s) || binary(s) == "" {
			continue
		}
		setup := setupOf(s)
		m := c.Services[setup]
		_, nats := s.Environment["SERVESCOPE_NATS_URL"]
		_, ch := s.Environment["SERVESCOPE_CLICKHOUSE_ADDR"]
		if !nats && !ch {
			continue
		}
		users++
		if d, ok := s.DependsOn[setup]; !ok || d.Condition != "service_completed_successfully" {
			t.Errorf("service %s uses NATS or ClickHouse but does not start after %s completed: %+v", name, setup, s.DependsOn)
		}
		for k, v := range s.Environment {
			if !strings.HasPrefix(k, "SERVESCOPE_NATS_") && k != "SERVESCOPE_SUBJECT_PREFIX" && !strings.HasPrefix(k, "SERVESCOPE_CLICKHOUSE_") && !strings.HasPrefix(k, "CONSUMER_") || k == "CONSUMER_METRICS_ADDR" {
				continue
			}
			if isCredential(k) {
				continue // an account (the console's read-only one, say), not a resource
			}
			if m.Environment[k] != v {
				t.Errorf("service %s has %s=%q, the setup %s %q: it would set up other resources than the service uses", name, k, v, setup, m.Environment[k])
			}
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "SERVESCOPE_STREAM_") {
				t.Errorf("service %s sets %s: stream limits belong to the setup step (%s), which owns the streams", name, k, setup)
			}
		}
	}
	if users < 4 {
		t.Errorf("only %d services use NATS or ClickHouse; the check is missing them", users)
	}
}

// setupOf is the setup step of s's deployment: cluster-migrate in the cluster profile, migrate
// otherwise.
func setupOf(s service) string {
	if inProfile(s, clusterProfile) {
		return "cluster-migrate"
	}
	return "migrate"
}

// isCredential reports whether an environment variable names who connects rather than what is
// connected to: services may use their own accounts on the resources the setup step made.
func isCredential(k string) bool {
	for _, w := range []string{"_USER", "_PASSWORD", "_TOKEN", "_CREDS", "_NKEY", "_CERT", "_KEY"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}
