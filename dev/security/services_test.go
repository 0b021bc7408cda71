package security

import (
	"bytes"
	"context"
	"fmt"
	"github.com/servescope/servescope/internal/access"
	"github.com/servescope/servescope/internal/access/accesstest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	devproc "github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/dev/testenv/natstest"
	"github.com/servescope/servescope/internal/chstore"
	"github.com/servescope/servescope/schema"
)

// The binaries the whole-system test builds and runs, by package directory under services/.
// serviceBinaries are the packages built for the test: the production services and the stand-ins
// they are tested against.
var serviceBinaries = []string{"services/gateway", "services/consumer", "services/collector", "services/detector", "sim/vllmsim", "sim/ragdemo"}

// proc is one running binary with its output in a log file.
type proc struct {
	*devproc.Process
	name string
	log  string
}

// buildServices builds every binary into one temporary directory with a single go build.
func buildServices(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, s := range serviceBinaries {
		args = append(args, "github.com/servescope/servescope/"+s)
	}
	cmd := exec.Command("go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// startService runs bin in its own process group with exactly the environment env returns for n
// fresh loopback addresses (plus PATH and HOME), and returns once the URL env returns answers
// 200, with the addresses; output goes to <logDir>/<name>.log. A service that finds an address
// taken before it binds it is started again on fresh ones (proc.StartOnFreePorts). The process
// is killed at the end of the test.
func startService(t *testing.T, name, bin, logDir string, n int, env func(addrs []string) (vars map[string]string, readyURL string), args ...string) (*proc, []string) {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	p, ports, err := devproc.StartOnFreePorts(t.Context(), n, func(ports []int) (devproc.Spec, error) {
		vars, ready := env(addrs(ports))
		environ := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for k, v := range vars {
			environ = append(environ, k+"="+v)
		}
		return devproc.Spec{Name: name, Path: bin, Args: args, Env: environ, ClearEnv: true, Log: logPath,
			DieWithCaller: true, Ready: devproc.HTTPReady(ready), ReadyTimeout: time.Minute}, nil
	})
	t.Cleanup(func() {
		if p != nil {
			_ = p.Kill(context.Background())
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, tail(string(b), 40))
		}
	})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return &proc{Process: p, name: name, log: logPath}, addrs(ports)
}

// addrs are the loopback addresses of ports.
func addrs(ports []int) []string {
	out := make([]string, len(ports))
	for i, p := range ports {
		out[i] = "127.0.0.1:" + strconv.Itoa(p)
	}
	return out
}

// stop ends the process: SIGKILL as a crash would, else SIGTERM to the process group and
// SIGKILL after 15 s.
func (s *proc) stop(sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = s.Kill(context.Background())
		return
	}
	_ = s.Stop(context.Background())
}

// rssBytes is the process's resident set size from /proc.
func (s *proc) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		t.Fatalf("read %s status: %v", s.name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %s VmRSS %q: %v", s.name, rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("%s status has no VmRSS", s.name)
	return 0
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func do(t *testing.T, method, url string, header map[string]string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if s, ok := body.(*sized); ok {
		req.ContentLength = s.n
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// zeros is an endless reader of '0' bytes: a body of any size without holding it in memory.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// oversize returns a body of n bytes, with a Content-Length (declared) or chunked.
func oversize(n int64, declared bool) io.Reader {
	r := io.LimitReader(zeros{}, n)
	if declared {
		// do sets the request's ContentLength from it; the body is still generated as it is sent.
		return &sized{Reader: r, n: n}
	}
	return r
}

type sized struct {
	io.Reader
	n int64
}

// TestServicesKeepSecretsAndLimitBodies runs the real binaries against a private NATS (user and
// password) and a private ClickHouse (least-privilege detector and consumer accounts), with every
// secret configured: NATS password, ClickHouse passwords, ingest token, webhook secret, ragdemo
// admin token, and a client API key passing through the gateway. It drives traffic including failed
// authentication and oversize bodies, checks each HTTP listener that takes a body refuses an
// oversize one without growing unbounded, and finally greps every log for every secret.
func TestServicesKeepSecretsAndLimitBodies(t *testing.T) {
	t.Parallel()
	start := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), name) }
	bin := buildServices(t)
	phase("built")
	logs := t.TempDir()
	work := t.TempDir()

	secrets := map[string]string{
		"NATS password":              accesstest.RandomSecret(t, "natspw-"),
		"wrong NATS password":        accesstest.RandomSecret(t, "badnatspw-"),
		"detector ClickHouse pw":     accesstest.RandomSecret(t, "detpw-"),
		"consumer ClickHouse pw":     accesstest.RandomSecret(t, "conpw-"),
		"wrong ClickHouse pw":        accesstest.RandomSecret(t, "badchpw-"),
		"ingest token":               accesstest.RandomSecret(t, "ingest-"),
		"wrong ingest token":         accesstest.RandomSecret(t, "badingest-"),
		"webhook secret":             accesstest.RandomSecret(t, "hook-"),
		"ragdemo admin token":        accesstest.RandomSecret(t, "admin-"),
		"client API key":             "sk-" + accesstest.RandomSecret(t, "client-"),
		"client API key, wrong path": "sk-" + accesstest.RandomSecret(t, "client2-"),
		"redacted prompt value":      accesstest.RandomSecret(t, "cardno-"),
	}
	natsSrv := natstest.StartAuth(t, testenv.NATSAuth{User: "servescope", Password: secrets["NATS password"]})
	a := accesstest.Access(t)
	a.Detector.Password, a.Consumer.Password = secrets["detector ClickHouse pw"], secrets["consumer ClickHouse pw"]
	chSrv, admin := accesstest.Server(t, a)
	prefix := testenv.UniqueName("sec")
	natsEnv := func(password string) map[string]string {
		return map[string]string{
			"SERVESCOPE_NATS_URL": natsSrv.URL(), "SERVESCOPE_SUBJECT_PREFIX": prefix,
			"SERVESCOPE_NATS_USER": "servescope", "SERVESCOPE_NATS_PASSWORD": password,
		}
	}
	merge := func(ms ...map[string]string) map[string]string {
		out := map[string]string{}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	secretFile := func(name, value string) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chEnv := func(acc access.Account) map[string]string {
		return map[string]string{
			"SERVESCOPE_CLICKHOUSE_ADDR": chSrv.Addr(), "SERVESCOPE_CLICKHOUSE_DATABASE": a.Database,
			"SERVESCOPE_CLICKHOUSE_USER": acc.User, "SERVESCOPE_CLICKHOUSE_PASSWORD_FILE": secretFile(acc.User+".pw", acc.Password),
		}
	}

	var hookMu sync.Mutex
	var hookBodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		hookBodies = append(hookBodies, b)
		hookMu.Unlock()
	}))
	defer hook.Close()

	const (
		gatewayMaxBody = 1 << 20
		ingestMaxBody  = 256 << 10
	)
	// The setup step runs first, as in the compose file: the streams and the durable consumers of
	// the consumer below and of the one with a wrong ClickHouse password at the end.
	setUpStreams(t, natsEnv(secrets["NATS password"]), map[string]string{"CONSUMER_FLUSH_INTERVAL": "200ms"},
		map[string]string{"CONSUMER_DURABLE": "servescope-writer-bad"})
	// Each service is started on fresh loopback addresses and waited for (its /healthz), on new
	// ones when another process took one before it bound it.
	one := func(key, ready string, vars map[string]string) func([]string) (map[string]string, string) {
		return func(a []string) (map[string]string, string) {
			return merge(vars, map[string]string{key: a[0]}), "http://" + a[0] + ready
		}
	}
	vllm, ad := startService(t, "vllmsim", filepath.Join(bin, "vllmsim"), logs, 1, one("VLLMSIM_LISTEN", "/health", map[string]string{
		"VLLMSIM_TIME_SCALE": "20",
	}))
	vllmAddr := ad[0]
	gwEnv := map[string]string{
		"GATEWAY_UPSTREAM_URL": "http://" + vllmAddr, "GATEWAY_MAX_BODY_BYTES": strconv.Itoa(gatewayMaxBody),
		"GATEWAY_INGEST_MAX_BYTES": strconv.Itoa(ingestMaxBody), "SERVESCOPE_INGEST_TOKEN": secrets["ingest token"],
	}
	gw, ad := startService(t, "gateway", filepath.Join(bin, "gateway"), logs, 1, one("GATEWAY_LISTEN_ADDR", "/healthz", merge(natsEnv(secrets["NATS password"]), gwEnv, map[string]string{
		"GATEWAY_SPOOL_DIR": filepath.Join(work, "gw-spool"), "GATEWAY_NAME": "sec-gw",
	})))
	gwAddr := ad[0]
	// A gateway that captures prompt and output text, with a redaction pattern for card numbers.
	gwCap, ad := startService(t, "gateway-capture", filepath.Join(bin, "gateway"), logs, 1, one("GATEWAY_LISTEN_ADDR", "/healthz", merge(natsEnv(secrets["NATS password"]), gwEnv, map[string]string{
		"GATEWAY_SPOOL_DIR": filepath.Join(work, "gw-cap-spool"), "GATEWAY_NAME": "sec-gw-capture",
		"GATEWAY_CAPTURE_CONTENT": "true", "GATEWAY_CAPTURE_REDACT": "cardno-[0-9a-f]+",
	})))
	gwCapAddr := ad[0]
	// A second gateway with a wrong NATS password: it must serve anyway (events go to its spool) and
	// log the refusal without the password.
	gwBad, ad := startService(t, "gateway-wrong-nats-password", filepath.Join(bin, "gateway"), logs, 1, one("GATEWAY_LISTEN_ADDR", "/healthz", merge(natsEnv(secrets["wrong NATS password"]), gwEnv, map[string]string{
		"GATEWAY_SPOOL_DIR": filepath.Join(work, "gw-bad-spool"), "GATEWAY_NAME": "sec-gw-bad",
	})))
	gwBadAddr := ad[0]
	con, _ := startService(t, "consumer", filepath.Join(bin, "consumer"), logs, 1, one("CONSUMER_METRICS_ADDR", "/healthz", merge(natsEnv(secrets["NATS password"]), chEnv(a.Consumer), map[string]string{
		"CONSUMER_FLUSH_INTERVAL": "200ms",
	})))
	col, ad := startService(t, "collector", filepath.Join(bin, "collector"), logs, 3, func(ad []string) (map[string]string, string) {
		return merge(natsEnv(secrets["NATS password"]), map[string]string{
			"COLLECTOR_OTLP_HTTP_ADDR": ad[0], "COLLECTOR_OTLP_GRPC_ADDR": ad[1], "COLLECTOR_METRICS_ADDR": ad[2],
			"COLLECTOR_TARGETS": "http://" + vllmAddr + "/metrics", "COLLECTOR_STATE_DIR": filepath.Join(work, "col-state"),
			"COLLECTOR_SPOOL_DIR": filepath.Join(work, "col-spool"),
		}), "http://" + ad[2] + "/healthz"
	}, "run")
	colHTTP := ad[0]
	det, _ := startService(t, "detector", filepath.Join(bin, "detector"), logs, 1, one("DETECTOR_METRICS_ADDR", "/healthz", merge(chEnv(a.Detector), map[string]string{
		"DETECTOR_INTERVAL": "1s", "DETECTOR_EVAL_DELAY": "0s",
		"DETECTOR_WEBHOOK_URLS": hook.URL, "DETECTOR_WEBHOOK_SECRET_FILE": secretFile("webhook", secrets["webhook secret"]),
	})))
	rag, ad := startService(t, "ragdemo", filepath.Join(bin, "ragdemo"), logs, 1, one("RAGDEMO_LISTEN_ADDR", "/healthz", merge(natsEnv(secrets["NATS password"]), map[string]string{
		"RAGDEMO_GATEWAY_URL": "http://" + gwAddr,
		"RAGDEMO_ADMIN_TOKEN": secrets["ragdemo admin token"], "RAGDEMO_MAX_TOKENS": "8",
		"RAGDEMO_SPOOL_DIR": filepath.Join(work, "rag-spool"),
	})))
	ragAddr := ad[0]

	phase("all services serve")
	// Traffic, with secrets in flight and failed authentication.
	chat := `{"model":"servescope/sim-7b","messages":[{"role":"user","content":"hello"}],"max_tokens":8,"stream":%t}`
	for i, gwURL := range []string{"http://" + gwAddr, "http://" + gwBadAddr} {
		key := secrets["client API key"]
		if i == 1 {
			key = secrets["client API key, wrong path"]
		}
		for _, stream := range []bool{false, true} {
			status, body := do(t, http.MethodPost, gwURL+"/v1/chat/completions",
				map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"},
				strings.NewReader(fmt.Sprintf(chat, stream)))
			if status != http.StatusOK {
				t.Fatalf("chat completion through %s (stream %t): %d %s", gwURL, stream, status, body)
			}
		}
	}
	capPrompt := `{"model":"servescope/sim-7b","messages":[{"role":"user","content":"my card is ` + secrets["redacted prompt value"] +
		` thanks"}],"max_tokens":8}`
	if status, body := do(t, http.MethodPost, "http://"+gwCapAddr+"/v1/chat/completions",
		map[string]string{"Content-Type": "application/json"}, strings.NewReader(capPrompt)); status != http.StatusOK {
		t.Fatalf("chat completion through the capturing gateway: %d %s", status, body)
	}
	phase("chat completions answered")
	rec := schema.NewAppRecord(schema.NewRequestID(), "security-test", time.Now())
	recJSON, err := schema.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	ingestURL := "http://" + gwAddr + "/servescope/v1/records"
	for _, tc := range []struct {
		name   string
		auth   string
		status int
	}{
		{"good token", "Bearer " + secrets["ingest token"], http.StatusAccepted},
		{"wrong token", "Bearer " + secrets["wrong ingest token"], http.StatusUnauthorized},
		{"no token", "", http.StatusUnauthorized},
		{"token without Bearer", secrets["ingest token"], http.StatusUnauthorized},
	} {
		h := map[string]string{"Content-Type": "application/json"}
		if tc.auth != "" {
			h["Authorization"] = tc.auth
		}
		if status, body := do(t, http.MethodPost, ingestURL, h, bytes.NewReader(recJSON)); status != tc.status {
			t.Errorf("ingest with %s: %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
	phase("ingest answered")
	if status, body := do(t, http.MethodPost, "http://"+ragAddr+"/ask", map[string]string{"Content-Type": "application/json"},
		strings.NewReader(`{"question":"What does the KV cache hold?"}`)); status != http.StatusOK {
		t.Errorf("ragdemo /ask: %d %s", status, body)
	}
	if status, _ := do(t, http.MethodPost, "http://"+ragAddr+"/admin/embedding-model",
		map[string]string{"Authorization": "Bearer " + secrets["wrong ingest token"]},
		strings.NewReader(`{"version":"hash-embed-v2"}`)); status != http.StatusUnauthorized && status != http.StatusForbidden {
		t.Errorf("ragdemo admin with a wrong token answered %d, want 401 or 403", status)
	}

	phase("ragdemo answered")
	// The consumer, logged in as the insert-only user, writes the gateway's requests.
	root := accesstest.Open(t, admin)
	deadline := time.Now().Add(2 * time.Minute) // returns as soon as the rows are there
	countWhere := func(gateway string) uint64 {
		var n uint64
		ctx := chstore.WithParams(context.Background(), map[string]string{"g": gateway})
		if err := root.QueryRow(ctx, "SELECT count() FROM requests WHERE gateway = {g:String}").Scan(&n); err != nil {
			t.Fatalf("count requests of %s: %v", gateway, err)
		}
		return n
	}
	for countWhere("sec-gw") < 3 || countWhere("sec-gw-capture") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer (user %s) wrote %d requests rows of sec-gw and %d of sec-gw-capture in 45 s, want 3 and 1",
				a.Consumer.User, countWhere("sec-gw"), countWhere("sec-gw-capture"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Content capture: off stores no text; on stores it with the redaction applied before publishing.
	rows, err := root.Query(context.Background(), "SELECT gateway, prompt_text, output_text FROM requests")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var gateway, prompt, output string
		if err := rows.Scan(&gateway, &prompt, &output); err != nil {
			t.Fatal(err)
		}
		switch gateway {
		case "sec-gw":
			if prompt != "" || output != "" {
				t.Errorf("gateway without capture stored prompt %q output %q", prompt, output)
			}
		case "sec-gw-capture":
			if !strings.Contains(prompt, "my card is [REDACTED] thanks") || output == "" {
				t.Errorf("capturing gateway stored prompt %q output %q, want the redacted prompt and the output", prompt, output)
			}
		}
		if strings.Contains(prompt, secrets["redacted prompt value"]) {
			t.Errorf("gateway %s stored the value its redaction pattern matches: %q", gateway, prompt)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	phase("consumer wrote requests")
	t.Run("body limits", func(t *testing.T) {
		// Each listener that takes a body, with a body 4x over its limit, sent with a declared length
		// and chunked. ok lists the statuses counted as a clean refusal.
		listeners := []struct {
			svc   *proc
			name  string
			url   string
			limit int64
			hdr   map[string]string
			ok    []int
		}{
			{gw, "gateway proxy", "http://" + gwAddr + "/v1/chat/completions", gatewayMaxBody, map[string]string{"Content-Type": "application/json"}, []int{413}},
			{gw, "gateway ingest", ingestURL, ingestMaxBody, map[string]string{"Authorization": "Bearer " + secrets["ingest token"], "Content-Type": "application/json"}, []int{413}},
			{col, "collector OTLP HTTP", "http://" + colHTTP + "/v1/traces", 32 << 20, map[string]string{"Content-Type": "application/x-protobuf"}, []int{413}},
			{rag, "ragdemo /ask", "http://" + ragAddr + "/ask", 64 << 10, map[string]string{"Content-Type": "application/json"}, []int{413}},
			{vllm, "vllmsim chat", "http://" + vllmAddr + "/v1/chat/completions", 8 << 20, map[string]string{"Content-Type": "application/json"}, []int{413}},
			{vllm, "vllmsim completions", "http://" + vllmAddr + "/v1/completions", 8 << 20, map[string]string{"Content-Type": "application/json"}, []int{413}},
			{vllm, "vllmsim tokenize", "http://" + vllmAddr + "/tokenize", 8 << 20, map[string]string{"Content-Type": "application/json"}, []int{413}},
		}
		for _, l := range listeners {
			for _, declared := range []bool{true, false} {
				before := l.svc.rssBytes(t)
				status, body := do(t, http.MethodPost, l.url, l.hdr, oversize(4*l.limit, declared))
				after := l.svc.rssBytes(t)
				refused := false
				for _, s := range l.ok {
					refused = refused || status == s
				}
				// A server that answers early and closes may leave the client with a write error
				// (status 0): the body was refused, which is what matters.
				if status == 0 && (strings.Contains(body, "connection reset") || strings.Contains(body, "broken pipe")) {
					refused = true
				}
				mode := map[bool]string{true: "with Content-Length", false: "chunked"}[declared]
				t.Logf("%s, %d bytes %s: status %d, RSS %d -> %d MiB", l.name, 4*l.limit, mode, status, before>>20, after>>20)
				if !refused {
					t.Errorf("%s: %d-byte body %s answered %d %q, want one of %v", l.name, 4*l.limit, mode, status, tail(body, 3), l.ok)
				}
				if growth := after - before; growth > l.limit+64<<20 {
					t.Errorf("%s: RSS grew by %d MiB on a refused %d MiB body (limit %d MiB)", l.name, growth>>20, (4*l.limit)>>20, l.limit>>20)
				}
			}
		}
	})

	phase("body limits checked")
	for _, s := range []*proc{rag, gw, gwBad, gwCap, con, col, det, vllm} {
		s.stop(syscall.SIGTERM)
	}
	phase("services stopped")
	// Last, because the libchdb engine aborts after refusing a native-protocol login: a consumer with
	// a wrong ClickHouse password must fail with a clear error that does not show it.
	bad, _ := startService(t, "consumer-wrong-clickhouse-password", filepath.Join(bin, "consumer"), logs, 1, one("CONSUMER_METRICS_ADDR", "/healthz",
		merge(natsEnv(secrets["NATS password"]), chEnv(access.Account{User: a.Consumer.User, Password: secrets["wrong ClickHouse pw"]}), map[string]string{
			"CONSUMER_DURABLE": "servescope-writer-bad",
		})))
	// The consumer keeps retrying (an unreachable ClickHouse never loses a record), so what matters is
	// that its log names the problem.
	deadline = time.Now().Add(2 * time.Minute) // returns as soon as the log says it
	for {
		badLog, _ := os.ReadFile(bad.log)
		if strings.Contains(string(badLog), "Authentication failed") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the consumer with a wrong ClickHouse password did not say authentication failed in 30 s:\n%s", tail(string(badLog), 10))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	bad.stop(syscall.SIGKILL)
	phase("wrong ClickHouse password refused")

	hookMu.Lock()
	bodies := hookBodies
	hookMu.Unlock()
	gwBadLog, _ := os.ReadFile(filepath.Join(logs, "gateway-wrong-nats-password.log"))
	if !strings.Contains(strings.ToLower(string(gwBadLog)), "authorization") {
		t.Errorf("the gateway with a wrong NATS password did not log the authorization failure:\n%s", tail(string(gwBadLog), 10))
	}

	files, err := filepath.Glob(filepath.Join(logs, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 9 {
		t.Fatalf("found %d service logs, want 9: %v", len(files), files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			t.Errorf("%s is empty: the grep would prove nothing", filepath.Base(f))
		}
		// The least-privilege accounts must be enough for the real binaries.
		if bytes.Contains(b, []byte("Not enough privileges")) {
			t.Errorf("%s was refused a privilege: %s", filepath.Base(f), tail(string(b), 5))
		}
		for what, secret := range secrets {
			if i := bytes.Index(b, []byte(secret)); i >= 0 {
				line := b[max(0, bytes.LastIndexByte(b[:i], '\n')+1):]
				if j := bytes.IndexByte(line, '\n'); j >= 0 {
					line = line[:j]
				}
				t.Errorf("%s logs the %s: %s", filepath.Base(f), what, line)
			}
		}
	}
	for _, b := range bodies {
		for what, secret := range secrets {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("a webhook body carries the %s", what)
			}
		}
	}
	if t.Failed() {
		return
	}
	t.Logf("grepped %d logs (%s) for %d secrets: none found", len(files), logs, len(secrets))
}
