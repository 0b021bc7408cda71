package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/internal/service"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func readyBody(t *testing.T, body string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("/readyz body %q is not a JSON object: %v", body, err)
	}
	return m
}

// /healthz answers while /readyz follows the service: starting, then its checks, then stopping.
func TestHealthApartFromReadiness(t *testing.T) {
	ready := service.NewReadiness()
	var chErr error = errors.New("dial tcp 127.0.0.1:9000: connect: connection refused")
	ready.Check("nats", func(context.Context) error { return nil })
	ready.Check("clickhouse", func(context.Context) error { return chErr })
	ready.Details(func() map[string]any { return map[string]any{"spool_events": 3} })
	mux := service.NewMux(service.NewRegistry("test"), ready)

	ready.Starting("connecting to ClickHouse")
	for _, tc := range []struct {
		setup      func()
		code       int
		reason     string
		clickhouse string
	}{
		{func() {}, 503, "starting: connecting to ClickHouse", chErr.Error()},
		{ready.Started, 503, "clickhouse: " + chErr.Error(), chErr.Error()},
		{func() { chErr = nil }, 200, "", "ok"},
		{ready.Stopping, 503, "stopping", "ok"},
	} {
		tc.setup()
		if code, body := get(t, mux, "/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("/healthz = %d %q, want 200 ok whatever the dependencies", code, body)
		}
		code, body := get(t, mux, "/readyz")
		m := readyBody(t, body)
		checks, _ := m["checks"].(map[string]any)
		reason, _ := m["reason"].(string)
		if code != tc.code || m["ready"] != (tc.code == 200) || reason != tc.reason ||
			checks["clickhouse"] != tc.clickhouse || checks["nats"] != "ok" || m["spool_events"] != 3.0 {
			t.Errorf("/readyz = %d %s; want %d, reason %q, clickhouse %q", code, body, tc.code, tc.reason, tc.clickhouse)
		}
	}
}

// A check gets a deadline, so a dependency that hangs cannot hang /readyz.
func TestReadinessCheckDeadline(t *testing.T) {
	ready := service.NewReadiness()
	ready.Started()
	ready.Check("hangs", func(ctx context.Context) error {
		if _, ok := ctx.Deadline(); !ok {
			return errors.New("no deadline")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	start := time.Now()
	ok, body := ready.Status(context.Background())
	if ok || body["reason"] != "hangs: context deadline exceeded" {
		t.Fatalf("Status = %v %v", ok, body)
	}
	if d := time.Since(start); d < service.CheckTimeout {
		t.Fatalf("a hanging check returned after %s, before its deadline %s", d, service.CheckTimeout)
	}
}

// The registry of a service exports its build information.
func TestRegistryBuildInfo(t *testing.T) {
	mux := service.NewMux(service.NewRegistry("gateway"), service.NewReadiness())
	code, body := get(t, mux, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	if !regexp.MustCompile(`(?m)^servescope_build_info\{[^}]*goversion="go[^"]+"[^}]*program="gateway"[^}]*,version="[^"]+"\} 1$`).MatchString(body) {
		t.Errorf("/metrics lacks servescope_build_info of the gateway with a Go version and a version:\n%s", body)
	}
	for _, want := range []string{"go_build_info{", "go_goroutines ", "process_start_time_seconds "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
