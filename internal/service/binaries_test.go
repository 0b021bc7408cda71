package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/testnet"
)

// The version and revision the binaries of these tests are linked with.
const (
	testVersion  = "9.9.9-test"
	testRevision = "abc123"
)

// Every binary of the module is built on this package: it answers --version with the version set
// at link time, and --help with the common flags, exit status 0 both; and every long-running
// service, started with NATS and ClickHouse away, is alive (/healthz), says whether it is ready
// (/readyz), exports its build information (/metrics), logs in the format --log.format asks, and
// stops with status 0 at SIGTERM.
func TestEveryBinary(t *testing.T) {
	list, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "github.com/servescope/servescope/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(list))
	if len(pkgs) < 15 {
		t.Fatalf("go list found %d binaries, want the 15 of the module at least: %v", len(pkgs), pkgs)
	}
	dir := t.TempDir()
	build := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator),
		"-ldflags", "-X github.com/prometheus/common/version.Version=" + testVersion + " -X github.com/prometheus/common/version.Revision=" + testRevision}, pkgs...)...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	bin := func(name string) string { return filepath.Join(dir, name) }

	t.Run("version and help", func(t *testing.T) {
		for _, pkg := range pkgs {
			name := filepath.Base(pkg)
			out, err := exec.Command(bin(name), "--version").CombinedOutput()
			if err != nil || !strings.Contains(string(out), ", version "+testVersion+" (branch: , revision: "+testRevision+")") {
				t.Errorf("%s --version: %v\n%s", pkg, err, out)
			}
			out, err = exec.Command(bin(name), "--help").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "log.level") || !strings.Contains(string(out), "log.format") {
				t.Errorf("%s --help: %v\n%s", pkg, err, out)
			}
		}
	})

	// NATS and ClickHouse are away: their addresses refuse connections.
	natsURL := "nats://" + closedAddr(t)
	chAddr := closedAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		// env besides the shared settings; {addr} is replaced by the address of the HTTP endpoints.
		env []string
		// ready is /readyz's status code with NATS and ClickHouse away, and readyBody a part of
		// its body.
		ready     int
		readyBody string
	}{
		// The gateway's readiness is its engines' (here away too); NATS being away only spools.
		{"gateway", nil, []string{"GATEWAY_LISTEN_ADDR={addr}", "GATEWAY_UPSTREAM_URL=http://" + closedAddr(t)},
			http.StatusServiceUnavailable, `"nats_connected":false`},
		// The collector takes spans and samples while NATS is away (they wait in its spool).
		{"collector", []string{"run"}, []string{"COLLECTOR_METRICS_ADDR={addr}", "COLLECTOR_OTLP_GRPC_ADDR=off", "COLLECTOR_OTLP_HTTP_ADDR=off"},
			http.StatusOK, `"nats_connected":false`},
		{"consumer", nil, []string{"CONSUMER_METRICS_ADDR={addr}"},
			http.StatusServiceUnavailable, `"reason":"starting`},
		{"detector", nil, []string{"DETECTOR_METRICS_ADDR={addr}"},
			http.StatusServiceUnavailable, `"reason":"starting: connect to ClickHouse"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			logPath := filepath.Join(state, tc.name+".log")
			// On a fresh address again when another process took the one picked before the
			// service bound it.
			p, ports, err := proc.StartOnFreePorts(t.Context(), 1, func(ports []int) (proc.Spec, error) {
				addr := "127.0.0.1:" + strconv.Itoa(ports[0])
				env := []string{
					"SERVESCOPE_NATS_URL=" + natsURL,
					"SERVESCOPE_CLICKHOUSE_ADDR=" + chAddr,
					"SERVESCOPE_CLICKHOUSE_DIAL_TIMEOUT=1s",
					"GATEWAY_SPOOL_DIR=" + filepath.Join(state, "spool"),
					"COLLECTOR_SPOOL_DIR=" + filepath.Join(state, "spool"),
					"COLLECTOR_STATE_DIR=" + state,
				}
				for _, e := range tc.env {
					env = append(env, strings.ReplaceAll(e, "{addr}", addr))
				}
				return proc.Spec{Name: tc.name, Path: bin(tc.name), Args: append(tc.args, "--log.format=json", "--log.level=debug"),
					Env: env, ClearEnv: true, Log: logPath, DieWithCaller: true, StopGrace: 2 * time.Minute,
					Ready: proc.HTTPReady("http://" + addr + "/healthz")}, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Kill(context.Background()) })
			addr := "127.0.0.1:" + strconv.Itoa(ports[0])
			// This start's output: the log also holds proc's notes ("=== ...") and the output of
			// a start that lost its address.
			stderr := runOutput{path: logPath}
			exited := make(chan error, 1)
			go func() { <-p.Done(); exited <- p.Err() }()
			base := "http://" + addr
			waitFor(t, exited, stderr, base+"/healthz", http.StatusOK, "ok")
			waitFor(t, exited, stderr, base+"/readyz", tc.ready, tc.readyBody)
			buildInfo := regexp.MustCompile(`(?m)^servescope_build_info\{[^}]*program="` + tc.name + `",revision="` + testRevision + `",tags="[^"]*",version="` + testVersion + `"\} 1$`)
			if body := waitFor(t, exited, stderr, base+"/metrics", http.StatusOK, "servescope_build_info"); !buildInfo.MatchString(body) {
				t.Errorf("/metrics lacks %s:\n%s", buildInfo, grepLines(body, "build_info"))
			}
			// SIGTERM, and SIGKILL (an error) if it has not stopped 2 minutes later.
			if err := p.Stop(t.Context()); err != nil {
				t.Fatalf("%s did not stop at SIGTERM: %v\n%s", tc.name, err, stderr.String())
			}
			if err := p.Err(); err != nil {
				t.Errorf("%s after SIGTERM: %v\n%s", tc.name, err, stderr.String())
			}
			// --log.format=json: every line of the log is a JSON object with a level and a message.
			sc := bufio.NewScanner(strings.NewReader(stderr.String()))
			lines := 0
			for sc.Scan() {
				var rec struct{ Level, Msg string }
				if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Level == "" || rec.Msg == "" {
					t.Errorf("log line is not a JSON record with level and msg: %q", sc.Text())
				}
				lines++
			}
			if lines == 0 {
				t.Errorf("%s logged nothing at debug level", tc.name)
			}
		})
	}
}

// waitFor polls url until it answers status with a body containing want, and returns the body.
// It fails the test after a minute or when the process exits.
func waitFor(t *testing.T, exited chan error, stderr fmt.Stringer, url string, status int, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for {
		select {
		case err := <-exited:
			t.Fatalf("exited (%v) while waiting for %s:\n%s", err, url, stderr.String())
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == status && strings.Contains(string(b), want) {
				return string(b)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last answer %s, want %d with %q\n%s", url, last, status, want, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// closedAddr is a loopback address that refuses connections: a dependency that is away.
// closedAddr is an address that refuses connections for the whole test.
func closedAddr(t *testing.T) string { return testnet.RefusingAddr(t) }

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// runOutput is the output of the last start of a process in its proc log: the lines after the
// last "=== ... proc: starting" note, without proc's notes.
type runOutput struct{ path string }

func (r runOutput) String() string {
	b, _ := os.ReadFile(r.path)
	text := string(b)
	if i := strings.LastIndex(text, " proc: starting "); i >= 0 {
		if j := strings.IndexByte(text[i:], '\n'); j >= 0 {
			text = text[i+j+1:]
		}
	}
	var out strings.Builder
	for l := range strings.Lines(text) {
		if !strings.HasPrefix(l, "=== ") {
			out.WriteString(l)
		}
	}
	return out.String()
}
