package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/testenv"
)

// instancesBinaries are the programs TestSeveralInstancesStoreEachRequestOnce runs as processes.
var instancesBinaries = []string{"services/servescope", "services/gateway", "services/consumer", "sim/vllmsim"}

// TestSeveralInstancesStoreEachRequestOnce runs the pipeline as a deployment past one machine
// runs it, every part a separate process through dev/proc: a 3-node NATS cluster, the setup step
// (`servescope migrate up`, streams at 3 replicas), one engine, two gateways in front of it and
// two consumers sharing the durable consumer. Clients send chat completions to both gateways
// while one consumer is SIGKILLed and started again. Every request answered is stored once in
// requests (read with FINAL), both gateways' records are there, and both consumers inserted
// (each acknowledged messages, the restarted one after its restart too).
func TestSeveralInstancesStoreEachRequestOnce(t *testing.T) {
	bin := buildBinaries(t, instancesBinaries)
	cluster := testenv.StartNATSCluster(t, 3)
	conn, ch := testenv.ClickHouse(t)
	prefix := testenv.UniqueName("t")
	const durable = "instances-writer"
	shared := map[string]string{
		"SERVESCOPE_NATS_URL":            cluster.URL(),
		"SERVESCOPE_SUBJECT_PREFIX":      prefix,
		"SERVESCOPE_CLICKHOUSE_ADDR":     strings.Join(ch.Addr, ","),
		"SERVESCOPE_CLICKHOUSE_DATABASE": ch.Database,
		"CONSUMER_DURABLE":               durable,
		"CONSUMER_BATCH_ROWS":            "500",
		"CONSUMER_FLUSH_INTERVAL":        "200ms",
	}
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute) // the sum of its bounded waits
	defer cancel()

	// The setup step, as the compose file's cluster-migrate runs it.
	setup := exec.CommandContext(ctx, filepath.Join(bin, "servescope"), "migrate", "up")
	setup.Env = environ(shared, "SERVESCOPE_STREAM_REPLICAS", "3", "SERVESCOPE_STREAM_MAX_BYTES", "268435456")
	out, err := setup.CombinedOutput()
	if err != nil {
		t.Fatalf("servescope migrate up: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "num_replicas 3") || !strings.Contains(string(out), "durable consumer "+durable) {
		t.Fatalf("servescope migrate up did not create the streams at 3 replicas and the durable consumer:\n%s", out)
	}

	_, engine := startProc(ctx, t, "vllmsim", filepath.Join(bin, "vllmsim"), logDir, func(addr string) (string, []string, []string) {
		return "http://" + addr + "/health", nil, []string{"--listen", addr, "--model", "sim-7b", "--time-scale", "20"}
	})
	gateways := make([]string, 2)
	for i := range gateways {
		name := "gateway-" + strconv.Itoa(i+1)
		spool := filepath.Join(t.TempDir(), "spool")
		_, gateways[i] = startProc(ctx, t, name, filepath.Join(bin, "gateway"), logDir, func(addr string) (string, []string, []string) {
			return "http://" + addr + "/readyz", environ(shared,
				"GATEWAY_LISTEN_ADDR", addr, "GATEWAY_UPSTREAM_URL", "http://"+engine,
				"GATEWAY_SPOOL_DIR", spool, "GATEWAY_NAME", name), nil
		})
	}
	consumers := make([]*proc.Process, 2)
	metrics := make([]string, 2)
	for i := range consumers {
		consumers[i], metrics[i] = startProc(ctx, t, "consumer-"+strconv.Itoa(i+1), filepath.Join(bin, "consumer"), logDir, func(addr string) (string, []string, []string) {
			return "http://" + addr + "/readyz", environ(shared, "CONSUMER_METRICS_ADDR", addr), nil
		})
	}

	tr := startChatTraffic(t, gateways)
	waitFor(t, 2*time.Minute, "both consumers to acknowledge messages", func(ctx context.Context) (bool, string, error) {
		a, b := acked(ctx, metrics[0]), acked(ctx, metrics[1])
		return a > 0 && b > 0, fmt.Sprintf("acknowledged %v and %v", a, b), nil
	})
	t.Logf("both consumers acknowledging after %d requests", tr.count())
	if err := consumers[0].Kill(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("consumer-1 SIGKILLed after %d requests", tr.count())
	at := tr.count()
	waitFor(t, 2*time.Minute, "100 more requests with one consumer", func(context.Context) (bool, string, error) {
		return tr.count() >= at+100, fmt.Sprintf("%d requests", tr.count()-at), nil
	})
	if err := consumers[0].Start(ctx); err != nil {
		t.Fatalf("start consumer-1 again: %v", err)
	}
	waitFor(t, 2*time.Minute, "the restarted consumer to acknowledge messages", func(ctx context.Context) (bool, string, error) {
		return acked(ctx, metrics[0]) > 0, "none acknowledged", nil
	})
	ids := tr.stop()
	t.Logf("traffic stopped: %d requests answered, %d failed", len(ids), tr.failed())
	if tr.failed() != 0 {
		t.Errorf("%d requests failed through the gateways", tr.failed())
	}

	// The gateways publish after answering; the ledger waits for every answered request.
	var lost, dup []string
	var stored map[string]uint64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		stored = idCounts(ctx, t, conn, "request_id", "requests FINAL")
		lost, dup = ledger(ids, stored)
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	raw := idCounts(ctx, t, conn, "request_id", "requests")
	_, rawDup := ledger(ids, raw)
	extra := 0
	for id := range stored {
		if _, ok := ids[id]; !ok {
			extra++
		}
	}
	t.Logf("ledger (requests FINAL): answered %d, stored %d, lost %d, duplicated %d, unknown %d; before merging %d request ids were stored more than once",
		len(ids), len(stored), len(lost), len(dup), extra, len(rawDup))
	if len(lost) != 0 || len(dup) != 0 || extra != 0 {
		t.Errorf("ledger: lost %d%s, duplicated %d%s, unknown %d; want 0, 0, 0", len(lost), sampleIDs(lost), len(dup), sampleIDs(dup), extra)
	}
	var gws []string
	if err := conn.QueryRow(ctx, "SELECT groupUniqArray(gateway) FROM requests").Scan(&gws); err != nil {
		t.Fatal(err)
	}
	if len(gws) != 2 {
		t.Errorf("requests came through gateways %q, want both", gws)
	}
}

// buildBinaries builds the packages (paths under the module) into one temporary directory with
// a single go build and returns it.
func buildBinaries(t *testing.T, pkgs []string) string {
	t.Helper()
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, p := range pkgs {
		args = append(args, "github.com/servescope/servescope/"+p)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// environ is the test's environment with the settings of m and the pairs kv added.
func environ(m map[string]string, kv ...string) []string {
	env := os.Environ()
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		env = append(env, kv[i]+"="+kv[i+1])
	}
	return env
}

// startProc starts path through dev/proc on a fresh loopback address, its output in
// logDir/name.log: describe gives, for the address, the health URL it is ready on (200), its
// environment and its arguments. A process that finds the address taken before it binds it is
// started again on a fresh one (proc.StartOnFreePorts). It is stopped (SIGTERM, then SIGKILL)
// when the test ends and its log's tail shown if the test failed. It returns the process and the
// address.
func startProc(ctx context.Context, t *testing.T, name, path, logDir string, describe func(addr string) (health string, env, args []string)) (*proc.Process, string) {
	t.Helper()
	p, ports, err := proc.StartOnFreePorts(ctx, 1, func(ports []int) (proc.Spec, error) {
		health, env, args := describe("127.0.0.1:" + strconv.Itoa(ports[0]))
		return proc.Spec{
			Name: name, Path: path, Args: args, Env: env, Log: filepath.Join(logDir, name+".log"),
			Ready:         proc.HTTPReady(health),
			ReadyTimeout:  2 * time.Minute,
			DieWithCaller: true,
		}, nil
	})
	if err != nil {
		t.Fatalf("start %s: %v (log %s)", name, err, filepath.Join(logDir, name+".log"))
	}
	t.Cleanup(func() {
		_ = p.Stop(context.Background())
		if t.Failed() {
			t.Logf("%s: %s", name, p.LogTail())
		}
	})
	return p, "127.0.0.1:" + strconv.Itoa(ports[0])
}

// acked is the consumer's servescope_consumer_acked_messages_total on its metrics address (0 when
// it does not answer).
func acked(ctx context.Context, addr string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "servescope_consumer_acked_messages_total") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				total += v
			}
		}
	}
	return total
}

// chatTraffic sends chat completions from 4 clients, in turn to each gateway, each with its own
// X-Request-Id, and keeps the ids of those answered 200.
type chatTraffic struct {
	mu     sync.Mutex
	ids    map[string]struct{}
	errs   int
	quit   chan struct{}
	done   sync.WaitGroup
	closed bool
}

func startChatTraffic(t *testing.T, gateways []string) *chatTraffic {
	tr := &chatTraffic{ids: map[string]struct{}{}, quit: make(chan struct{})}
	client := &http.Client{Timeout: time.Minute}
	for w := range 4 {
		tr.done.Add(1)
		go func() {
			defer tr.done.Done()
			for i := 0; ; i++ {
				select {
				case <-tr.quit:
					return
				default:
				}
				id := fmt.Sprintf("instances-%d-%d", w, i)
				body := fmt.Sprintf(`{"model":"sim-7b","messages":[{"role":"user","content":"request %s"}],"max_tokens":4}`, id)
				req, err := http.NewRequest(http.MethodPost, "http://"+gateways[(w+i)%len(gateways)]+"/v1/chat/completions", bytes.NewReader([]byte(body)))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = bytes.NewBuffer(nil).ReadFrom(resp.Body)
					resp.Body.Close()
				}
				tr.mu.Lock()
				if ok {
					tr.ids[id] = struct{}{}
				} else {
					tr.errs++
				}
				tr.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { tr.stop() })
	return tr
}

func (tr *chatTraffic) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.ids)
}

func (tr *chatTraffic) failed() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.errs
}

// stop ends the traffic and returns the ids of the requests answered.
func (tr *chatTraffic) stop() map[string]struct{} {
	tr.mu.Lock()
	if !tr.closed {
		tr.closed = true
		close(tr.quit)
	}
	tr.mu.Unlock()
	tr.done.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ids
}
