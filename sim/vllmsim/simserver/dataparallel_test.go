package simserver_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/servescope/servescope/sim/vllmsim/engine"
	"github.com/servescope/servescope/sim/vllmsim/sim"
	"github.com/servescope/servescope/sim/vllmsim/vllmversion"
)

// syncBuffer is a log writer the engines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor polls cond every 20 ms for up to a minute (the machine may be loaded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startStreams starts n long streams and waits until each has its first token.
func startStreams(t *testing.T, url string, n int) []*http.Response {
	t.Helper()
	var out []*http.Response
	for range n {
		resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":3000,"min_tokens":3000,"stream":true}`, nil)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
				break
			}
		}
		out = append(out, resp)
	}
	return out
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDataParallel: vllmsim --data-parallel-size 2 as vLLM serves it. Requests go to the engine
// with the lowest waiting × 4 + running (vllm/v1/engine/core_client.py DPLBAsyncMPClient), so four
// streams run two on each engine; /metrics has each engine's series under engine="0" and
// engine="1" in one exposition (vllm/v1/metrics/loggers.py make_per_engine); the log has each
// engine's "Engine 00N:" stats line (LoggingStatLogger), or with --aggregate-engine-logging one
// "2 Engines Aggregated:" line whose Running is the sum (AggregatedLoggingStatLogger).
func TestDataParallel(t *testing.T) {
	for _, aggregate := range []bool{false, true} {
		t.Run(map[bool]string{false: "per engine", true: "aggregated"}[aggregate], func(t *testing.T) {
			var log syncBuffer
			ts := startSim(t, sim.Options{Version: vllmversion.Main, DataParallelSize: 2, AggregateEngineLogging: aggregate, LogWriter: &log})
			streams := startStreams(t, ts.URL, 4)
			defer func() {
				for _, r := range streams {
					r.Body.Close()
				}
			}()
			for _, want := range []string{
				`vllm:num_requests_running{engine="0",model_name="servescope/sim-7b"} 2`,
				`vllm:num_requests_running{engine="1",model_name="servescope/sim-7b"} 2`,
				`vllm:kv_cache_usage_perc{engine="1",model_name="servescope/sim-7b"}`,
				`vllm:request_success_total{engine="1",finished_reason="stop",model_name="servescope/sim-7b"} 0`,
			} {
				if m := scrape(t, ts.URL); !strings.Contains(m, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			perEngine := regexp.MustCompile(`\] Engine 00([01]): .*Running: 2 reqs`)
			agg := regexp.MustCompile(`\] 2 Engines Aggregated: .*Running: 4 reqs`)
			if aggregate {
				waitFor(t, "an aggregated stats line with Running 4", func() bool { return agg.MatchString(log.String()) })
				if strings.Contains(log.String(), "] Engine 00") {
					t.Errorf("per-engine stats lines beside the aggregated ones:\n%s", log.String())
				}
			} else {
				waitFor(t, "both engines' stats lines with Running 2", func() bool {
					seen := map[string]bool{}
					for _, m := range perEngine.FindAllStringSubmatch(log.String(), -1) {
						seen[m[1]] = true
					}
					return seen["0"] && seen["1"]
				})
			}
		})
	}
}

// TestDataParallelCrashOfOneEngine: engine 1 of 2 dies of the sampler's out-of-memory error; its
// engine core writes the scheduler dump and the traceback under its own process prefix
// (EngineCore_DP1), and the server is dead for every request (vLLM's client marks the engines
// dead): /health answers 503.
func TestDataParallelCrashOfOneEngine(t *testing.T) {
	var log syncBuffer
	cfg := engine.DefaultConfig()
	cfg.CrashAtRunning = 2
	ts := startSim(t, sim.Options{Version: vllmversion.Main, DataParallelSize: 2, AggregateEngineLogging: true, CrashEngine: 1,
		Engine: cfg, LogWriter: &log})
	// Requests until engine 1 has three running and dies (the routing alternates between the
	// engines, so about six); engine 0 has no crash limit.
	var wg sync.WaitGroup
	dead := func() bool {
		select {
		case <-ts.done:
			return true
		default:
			return false
		}
	}
	for i := 0; i < 40 && !dead(); i++ {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3000,"min_tokens":3000}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "engine 1 to die", dead)
	wg.Wait()
	text := log.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`\(EngineCore_DP1 pid=\d+\) ERROR .*Dumping scheduler stats: SchedulerStats\(num_running_reqs=3,`),
		regexp.MustCompile(`\(EngineCore_DP1 pid=\d+\) ERROR .*torch.OutOfMemoryError: CUDA out of memory`),
		regexp.MustCompile(`(?m)^\(EngineCore_DP1 pid=\d+\) Process EngineCore_DP1:$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("log lacks %s:\n%s", want, text)
		}
	}
	if regexp.MustCompile(`\(EngineCore_DP0 pid=\d+\) ERROR`).MatchString(text) {
		t.Errorf("engine 0 logged an error of its own:\n%s", text)
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("health after one engine died: %v %v, want 503", resp, err)
	}
}
