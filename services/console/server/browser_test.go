package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/servescope/servescope/dev/servers"
	"github.com/servescope/servescope/dev/testclock"
	"github.com/servescope/servescope/dev/testenv"
	"github.com/servescope/servescope/internal/config"
)

// chromiumPath is Debian's chromium, which scripts/dev-services installs.
const chromiumPath = "/usr/bin/chromium"

// browser is a headless Chromium for the test; errs collects every JavaScript exception, console
// error and browser log error (a CSP refusal, an asset that failed to load).
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Unavailable(t, "chromium: %v (scripts/dev-services up installs Debian's chromium)", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1500, 1000),
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx); err != nil {
		testenv.Unavailable(t, "start chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errs = append(b.errs, m.String()+" "+m.URL)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// errors returns and forgets the errors seen so far, leaving out those containing an allowed text.
func (b *browser) errors(allow ...string) []string {
	time.Sleep(200 * time.Millisecond) // the console events of the last page arrive after it
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, e := range b.errs {
		ok := false
		for _, a := range allow {
			ok = ok || strings.Contains(e, a)
		}
		if !ok {
			out = append(out, e)
		}
	}
	b.errs = nil
	return out
}

func (b *browser) do(t *testing.T, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval runs a JavaScript expression on the page and returns its value.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshotDir is where the screenshots go: .cache/console-screenshots at the repository root.
func screenshotDir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cache, err := servers.RepoCacheDir(wd)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "console-screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (b *browser) shot(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	// Quality below 100 makes Chromium encode a JPEG.
	jpg, err := chromedp.Run(ctx, chromedp.FullScreenshot(90))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(screenshotDir(t), name+".jpg")
	if err := os.WriteFile(p, jpg, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// pngShot saves a PNG of the whole page, or of the element sel when it is not empty.
func (b *browser) pngShot(t *testing.T, name, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	action := chromedp.FullScreenshot(100)
	if sel != "" {
		action = chromedp.Screenshot(sel)
	}
	png, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(screenshotDir(t), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

// waitLoaded waits until the page's script has drawn every panel (body[data-loaded]).
func waitLoaded() chromedp.Action[chromedp.Void] {
	return chromedp.WaitReady(`body[data-loaded="1"]`)
}

const testToken = "console-test-token-3f9a"

func startConsole(t *testing.T, ch config.ClickHouse, now time.Time, mutate func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := Config{ClickHouse: ch, ListenAddr: "127.0.0.1:0", Auth: AuthToken, Token: testToken, QueryTimeout: time.Minute}
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, srv
}

// TestConsoleInBrowser drives the console in a real headless Chromium against real ClickHouse
// holding demo-shaped data: every panel draws a non-empty series and its baseline with no
// JavaScript error, the rule badges say what the alerts table says, the filters change what the
// queries return (bound parameters, a hostile value included), the complaint pages show
// diagnose's branches, the crash page postmortem's reading, and the alerts page the timeline.
func TestConsoleInBrowser(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	// The normal day follows the time of day: the instant comes from testclock (pinned by scripts/test).
	now := testclock.EvalTime(t, 0)
	data := seed(t, conn, now)
	_, srv := startConsole(t, ch, now, nil)
	b := newBrowser(t)

	// Logging in through the #token= link sets the session cookie; nothing else gets in.
	resp, err := http.Get(srv.URL + "/api/panel/ttft")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API without a token: %s, want 401", resp.Status)
	}
	if r := get(t, srv.URL+"/readyz"); r.status != http.StatusOK || r.body != "ready\n" {
		t.Errorf("/readyz: %d %q, want 200 ready", r.status, r.body)
	}
	b.do(t, chromedp.Navigate(srv.URL+"/login?next="+url.QueryEscape("/?range=1h")+"#token="+testToken), waitLoaded())

	t.Run("dashboard", func(t *testing.T) {
		panels := eval[[]map[string]string](t, b, `Array.from(document.querySelectorAll('[data-panel]')).map(p => ({
			name: p.dataset.panel, points: p.dataset.points || '', baselines: p.dataset.baselines || '',
			badge: (p.querySelector('[data-badge]').dataset.state || ''), action: p.querySelector('.action').innerText,
			canvas: String(p.querySelectorAll('canvas').length)}))`)
		if len(panels) != 21 {
			t.Fatalf("%d panels drawn, want 21: %v", len(panels), panels)
		}
		for _, p := range panels {
			if p["points"] == "" || p["points"] == "0" {
				t.Errorf("panel %s drew no series point", p["name"])
			}
			if p["baselines"] == "" || p["baselines"] == "0" {
				t.Errorf("panel %s drew no baseline", p["name"])
			}
			if p["canvas"] == "0" {
				t.Errorf("panel %s has no chart", p["name"])
			}
			if len(p["action"]) < 20 {
				t.Errorf("panel %s shows no action text", p["name"])
			}
		}
		// The badges say what the alerts table says at the range's end.
		want := map[string]string{}
		for _, name := range []string{"ttft", "tpot", "queue", "retrieval", "kv"} {
			var st string
			q := fmt.Sprintf(`SELECT if(countIf(st = 'firing') > 0, 'firing', if(countIf(st = 'pending') > 0, 'pending', 'ok')) FROM (
				SELECT rule, fingerprint, argMax(state, ts) AS st, argMax(labels, ts) AS l FROM alerts GROUP BY rule, fingerprint)
				WHERE %s`, map[string]string{
				"ttft":      "rule = 'latency_p95' AND l['metric'] = 'ttft_s'",
				"tpot":      "rule = 'latency_p95' AND l['metric'] = 'tpot_s'",
				"queue":     "rule = 'overload_queue'",
				"retrieval": "rule IN ('retrieval_score_drift', 'retrieval_version_change')",
				"kv":        "rule = 'kv_cache_pressure'",
			}[name])
			if err := conn.QueryRow(context.Background(), q).Scan(&st); err != nil {
				t.Fatal(err)
			}
			want[name] = st
		}
		if want["ttft"] != "firing" || want["retrieval"] != "pending" || want["queue"] != "ok" {
			t.Fatalf("seeded alerts read back as %v", want)
		}
		for _, p := range panels {
			if w, ok := want[p["name"]]; ok && p["badge"] != w {
				t.Errorf("panel %s badge %q, the alerts table says %q", p["name"], p["badge"], w)
			}
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors on the dashboard:\n%s", strings.Join(errs, "\n"))
		}
		b.shot(t, "dashboard")
		// The service-level row, each panel as a PNG to look at.
		for _, name := range []string{"goodput", "error_budget", "headroom", "cost"} {
			b.do(t, chromedp.ScrollIntoView("#panel-"+name))
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			png, err := chromedp.Run(ctx, chromedp.Screenshot("#panel-"+name))
			cancel()
			if err != nil {
				t.Fatalf("screenshot of panel %s: %v", name, err)
			}
			if err := os.WriteFile(filepath.Join(screenshotDir(t), "panel-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("filters", func(t *testing.T) {
		points := func(q string) map[string]string {
			b.do(t, chromedp.Navigate(srv.URL+"/?"+q), waitLoaded())
			return eval[map[string]string](t, b, `Object.fromEntries(Array.from(document.querySelectorAll('[data-panel]')).map(p => [p.dataset.panel, p.dataset.points || '']))`)
		}
		all := points("range=1h")
		other := points("range=1h&model=" + url.QueryEscape(data.otherModel))
		hostile := points("range=1h&model=" + url.QueryEscape("x' OR 1=1 --"))
		for _, name := range []string{"ttft", "e2e", "errors", "wrong_script"} {
			if all[name] == other[name] {
				t.Errorf("panel %s: %s points for every model and for %s: the model filter changed nothing", name, all[name], data.otherModel)
			}
			if hostile[name] != "0" {
				t.Errorf("panel %s: %s points for a model named x' OR 1=1 --: the filter is not a bound parameter", name, hostile[name])
			}
		}
		// The filter is in the URL: a shared link opens the same view.
		b.do(t, chromedp.Navigate(srv.URL+"/?range=6h&model="+url.QueryEscape(data.model)), waitLoaded())
		model := eval[string](t, b, `document.getElementById('f-model').value`)
		if model != data.model {
			t.Errorf("model filter box holds %q after opening a shared URL, want %q", model, data.model)
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors while filtering:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("complaints", func(t *testing.T) {
		for _, c := range Complaints {
			q := "range=1h"
			switch c.ID {
			case "first-word", "hangs":
				q = "from=" + data.overloadFrom.Format(time.RFC3339) + "&to=" + data.overloadTo.Format(time.RFC3339)
			case "mixed-language":
				// The window the user complains about: the wrong-script answers, not the whole hour
				// where they are 8 among a thousand.
				q = "from=" + data.now.Add(-20*time.Minute).Format(time.RFC3339) + "&to=" + data.now.Add(-10*time.Minute).Format(time.RFC3339)
			}
			b.do(t, chromedp.Navigate(srv.URL+"/complaint/"+c.ID+"?"+q), waitLoaded())
			branches := eval[[]map[string]string](t, b, `Array.from(document.querySelectorAll('#focus [data-branch]')).map(e => ({id: e.dataset.branch, status: e.dataset.status}))`)
			if len(branches) != len(c.Branches) {
				t.Errorf("complaint %s shows %d of diagnose's branches, want %d (%v)", c.ID, len(branches), len(c.Branches), c.Branches)
			}
			for i, br := range branches {
				if i < len(c.Branches) && br["id"] != c.Branches[i] {
					t.Errorf("complaint %s: branch %d is %s, want %s", c.ID, i, br["id"], c.Branches[i])
				}
			}
			if c.ID == "first-word" {
				// The reading says which window it compared with which baseline: the detector's,
				// the 24 h ending 1 h before the window starts.
				ranges := eval[string](t, b, `document.querySelector('#ranges').textContent`)
				stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }
				for _, want := range []string{
					"window " + stamp(data.overloadFrom) + " → " + stamp(data.overloadTo),
					"baseline " + stamp(data.overloadFrom.Add(-25*time.Hour)) + " → " + stamp(data.overloadFrom.Add(-time.Hour)),
					"the 24h ending 1h before the window starts",
				} {
					if !strings.Contains(ranges, want) {
						t.Errorf("complaint %s: ranges %q, want %q in it", c.ID, ranges, want)
					}
				}
				// The overload_queue alert fired inside the window: the verdict names it first.
				named := eval[[]string](t, b, `Array.from(document.querySelectorAll('#symptom-alerts [data-rule]')).map(e => e.dataset.rule)`)
				if status := eval[string](t, b, `document.getElementById('verdict').dataset.status`); status != "finding" || !slices.Contains(named, "overload_queue") {
					t.Errorf("complaint %s: verdict %s naming %v, want a finding naming overload_queue", c.ID, status, named)
				}
			}
			wantFinding := map[string]string{"first-word": "queue_overload", "hangs": "queue_overload", "off-topic": "retrieval_drift",
				"mixed-language": "wrong_language", "server-500": "engine_crash"}[c.ID]
			if wantFinding != "" {
				found := false
				for _, br := range branches {
					found = found || (br["id"] == wantFinding && br["status"] == "finding")
				}
				if !found {
					t.Errorf("complaint %s: branch %s is not a finding: %v", c.ID, wantFinding, branches)
				}
			}
			if c.ID == "first-word" || c.ID == "off-topic" {
				b.shot(t, "complaint-"+c.ID)
			}
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors on the complaint pages:\n%s", strings.Join(errs, "\n"))
		}
	})

	// Every complaint page over the last hour names every alert that fired in it: those on its
	// symptom first, the others after; the panels mark them on their time axis, and their badges
	// say what happened in the range.
	t.Run("last hour", func(t *testing.T) {
		var fired []string
		rows, err := conn.Query(context.Background(), `SELECT DISTINCT rule FROM alerts WHERE state = 'firing' ORDER BY rule`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				t.Fatal(err)
			}
			fired = append(fired, r)
		}
		rows.Close()
		if len(fired) < 2 {
			t.Fatalf("the seed fired %v, want at least two rules", fired)
		}
		for _, c := range Complaints {
			b.do(t, chromedp.Navigate(srv.URL+"/complaint/"+c.ID+"?range=1h"), waitLoaded())
			named := eval[[]string](t, b, `Array.from(document.querySelectorAll('#alerts-here [data-rule]')).map(e => e.dataset.rule)`)
			slices.Sort(named)
			if !slices.Equal(slices.Compact(named), fired) {
				t.Errorf("complaint %s over the last hour names the alerts %v, want every one that fired: %v", c.ID, named, fired)
			}
			if c.ID == "first-word" {
				symptom := eval[[]string](t, b, `Array.from(document.querySelectorAll('#symptom-alerts [data-rule]')).map(e => e.dataset.rule)`)
				if !slices.Contains(symptom, "overload_queue") || !slices.Contains(symptom, "latency_p95") {
					t.Errorf("complaint first-word names %v on its symptom, want overload_queue and latency_p95", symptom)
				}
				queue := eval[map[string]string](t, b, `(p => ({marks: p.dataset.alertMarks || '', badge: p.querySelector('[data-badge]').innerText,
					note: p.querySelector('[data-baseline-note]').innerText}))(document.getElementById('panel-queue'))`)
				if queue["marks"] != "1" || !strings.Contains(queue["badge"], "resolved") || !strings.Contains(queue["note"], "the 24h ending 1h before the window starts") {
					t.Errorf("queue panel: %v, want one alert mark, a badge saying it fired and resolved, and its baseline stated", queue)
				}
				b.pngShot(t, "complaint-first-word-last-hour", "")
				b.pngShot(t, "complaint-first-word-verdict", "#verdict")
				b.pngShot(t, "panel-queue-alert-marks", "#panel-queue")
				b.pngShot(t, "panel-ttft-alert-marks", "#panel-ttft")
			}
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors on the complaint pages:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("crash", func(t *testing.T) {
		b.do(t, chromedp.Navigate(srv.URL+"/crash?range=1h"), waitLoaded())
		verdict := eval[string](t, b, `(document.querySelector('#verdict h2') || {}).innerText || ''`)
		arithmetic := eval[string](t, b, `(document.querySelector('#arithmetic') || {}).innerText || ''`)
		if !strings.Contains(verdict, "type one") || !strings.Contains(arithmetic, "193 running") || !strings.Contains(arithmetic, "112.00 MiB") {
			t.Errorf("crash page: verdict %q, arithmetic %q", verdict, arithmetic)
		}
		b.shot(t, "crash")
	})

	t.Run("alerts", func(t *testing.T) {
		b.do(t, chromedp.Navigate(srv.URL+"/alerts?range=1h&model="+url.QueryEscape(data.model)), waitLoaded())
		rows := eval[int](t, b, `document.querySelectorAll('#alert-history tbody tr').length`)
		active := eval[int](t, b, `document.querySelectorAll('#active-alerts tbody tr').length`)
		firing := eval[[]string](t, b, `Array.from(document.querySelectorAll('#active-alerts tr[data-state=firing]')).map(r => r.dataset.rule)`)
		if rows != 7 || active != 3 || strings.Join(firing, ",") != data.firingRule+",unfinished_rising" {
			t.Errorf("alerts page: %d state changes (want 7), %d active (want 3), firing %v (want [%s unfinished_rising])", rows, active, firing, data.firingRule)
		}
		// A resolved alert shows what its rule measured when it resolved, not its last firing value:
		// overload_queue's window then held no sample with requests waiting.
		resolved := eval[map[string]string](t, b, `(r => r ? {value: r.querySelector('td.resolution').dataset.value, text: r.innerText} : {})(document.querySelector('#alert-history tr[data-state=resolved]'))`)
		if resolved["value"] != "0" || !strings.Contains(resolved["text"], "came back to 0") || !strings.Contains(resolved["text"], "last firing value 1") {
			t.Errorf("resolved overload_queue row: %v, want it to come back to 0 (its last firing value 1 beside)", resolved)
		}
		// Each state change opens the dashboard at its moment, with the alert's model and engine.
		dash := eval[[]string](t, b, `Array.from(document.querySelectorAll('#alert-history a.dash-at')).map(a => a.getAttribute('href'))`)
		for _, h := range dash {
			u, err := url.Parse(h)
			if err != nil || u.Path != "/" || u.Query().Get("from") == "" || u.Query().Get("to") == "" {
				t.Errorf("state change links to %q, want the dashboard at its moment", h)
			}
		}
		if len(dash) != rows {
			t.Errorf("%d of %d state changes link to the dashboard", len(dash), rows)
		}
		ticks := eval[[]string](t, b, `Array.from(document.querySelectorAll('#alerts-axis .tick')).map(e => e.innerText + '@' + e.style.left)`)
		if len(ticks) < 3 {
			t.Errorf("the timeline's time axis has %d labels: %v", len(ticks), ticks)
		}
		// The stuck request the alert names links to its page.
		stuck := eval[string](t, b, `(document.querySelector('#active-alerts tr[data-rule=unfinished_rising] a.reqlink') || {}).href || ''`)
		if !strings.Contains(stuck, "/request/"+data.hung.RequestID) || !strings.Contains(stuck, "range=1h") {
			t.Errorf("the stuck request's link %q", stuck)
		}
		b.shot(t, "alerts")

		// A range the page cannot read is an error with status 400, not an empty page.
		for _, q := range []string{"from=yesterday", "range=2y", "from=2026-12-01T11:00:00Z&to=2026-12-01T10:00:00Z"} {
			resp := get(t, srv.URL+"/alerts?"+q)
			if resp.status != http.StatusBadRequest || !strings.Contains(resp.body, `id="bad-view"`) || strings.Contains(resp.body, "No alert is pending") {
				t.Errorf("/alerts?%s: status %d, body without the error or with an empty result", q, resp.status)
			}
		}
		if resp := get(t, srv.URL+"/alerts?rule=overload_queue&from="+url.QueryEscape(data.now.Add(-time.Hour).Format(time.RFC3339))+"&to="+url.QueryEscape(data.now.Format(time.RFC3339))); resp.status != 200 || !strings.Contains(resp.body, "came back to") {
			t.Errorf("/alerts with rule, from and to: status %d", resp.status)
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors on the alerts and crash pages:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("links keep the view", func(t *testing.T) {
		view := "range=6h&model=" + url.QueryEscape(data.model)
		for _, page := range []string{"/", "/alerts", "/complaint/first-word", "/crash", "/request/" + data.overload.RequestID} {
			b.do(t, chromedp.Navigate(srv.URL+page+"?"+view), waitLoaded())
			hrefs := eval[[]string](t, b, `Array.from(document.querySelectorAll('header a, a.reqlink')).map(a => a.getAttribute('href'))`)
			for _, h := range hrefs {
				u, err := url.Parse(h)
				if err != nil {
					t.Fatal(err)
				}
				if u.Query().Get("range") != "6h" || u.Query().Get("model") != data.model {
					t.Errorf("%s links to %q, which drops the view %s", page, h, view)
				}
			}
			if len(hrefs) < 5 {
				t.Errorf("%s has %d links in its header", page, len(hrefs))
			}
		}
	})

	t.Run("from the slowest requests to a request and back", func(t *testing.T) {
		view := "range=6h&model=" + url.QueryEscape(data.model)
		b.do(t, chromedp.Navigate(srv.URL+"/?"+view), waitLoaded(), chromedp.WaitVisible(`#slow-requests a.reqlink`))
		id := eval[string](t, b, `document.querySelector('#slow-requests a.reqlink').innerText`)
		b.do(t, chromedp.Click(`#slow-requests a.reqlink`), chromedp.WaitVisible(`#request`), waitLoaded())
		sameView := func(loc string) bool {
			u, err := url.Parse(loc)
			return err == nil && u.Query().Get("range") == "6h" && u.Query().Get("model") == data.model && u.Query().Get("from") == ""
		}
		loc := eval[string](t, b, `location.pathname + location.search`)
		if !strings.HasPrefix(loc, "/request/"+id+"?") || !sameView(loc) {
			t.Errorf("the slowest request's link opened %s, want /request/%s with %s", loc, id, view)
		}
		shown := eval[string](t, b, `document.querySelector('#request').dataset.request`)
		boxes := eval[[]string](t, b, `[document.getElementById('f-range').value, document.getElementById('f-model').value]`)
		if shown != id || boxes[0] != "6h" || boxes[1] != data.model {
			t.Errorf("request page shows %q with range %q and model %q, want %s in the view 6h, %s", shown, boxes[0], boxes[1], id, data.model)
		}
		// Back to the dashboard through the header: the same view.
		b.do(t, chromedp.Click(`header nav a[href^="/?"]`), waitLoaded())
		if q := eval[string](t, b, `location.pathname + location.search`); !strings.HasPrefix(q, "/?") || !sameView(q) {
			t.Errorf("back on the dashboard at %s, want /?%s", q, view)
		}
		if m := eval[string](t, b, `document.getElementById('f-model').value`); m != data.model {
			t.Errorf("dashboard's model filter %q after coming back, want %q", m, data.model)
		}
		// And with the browser's back button, twice: the request page, then the dashboard as it was.
		back := func(wantPrefix string) string {
			eval[any](t, b, `history.back()`)
			var loc string
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if loc = eval[string](t, b, `location.pathname + location.search`); strings.HasPrefix(loc, wantPrefix) {
					break
				}
			}
			return loc
		}
		if loc := back("/request/"); !strings.HasPrefix(loc, "/request/"+id) || !sameView(loc) {
			t.Errorf("browser back lands on %s, want the request page in the view", loc)
		}
		if loc := back("/?"); !strings.HasPrefix(loc, "/?") || !sameView(loc) {
			t.Errorf("browser back lands on %s, want /?%s", loc, view)
		}
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("an overload request", func(t *testing.T) {
		b.do(t, chromedp.Navigate(srv.URL+"/request/"+data.overload.ResponseID+"?range=1h"), waitLoaded(), chromedp.WaitVisible(`#request`))
		queue := eval[map[string]string](t, b, `(r => r ? {source: r.dataset.source, lasts: r.children[2].innerText} : {})(document.querySelector('#steps tr[data-step=queue]'))`)
		if queue["source"] != "engine span" || queue["lasts"] != "0.472" {
			t.Errorf("queue step %v, want 0.472 s from the engine span", queue)
		}
		state := eval[map[string]string](t, b, `(r => r ? {running: r.querySelector('.running').innerText, waiting: r.querySelector('.waiting').innerText} : {})(document.querySelector('#state-table tr[data-sample=before]'))`)
		if state["running"] != "256" || state["waiting"] != "44" {
			t.Errorf("engine state at arrival %v, want 256 running and 44 waiting", state)
		}
		facts := eval[string](t, b, `document.querySelector('#engine-state').innerText`)
		if !strings.Contains(facts, "every slot was taken") || !strings.Contains(facts, "max_num_seqs") {
			t.Errorf("engine state %q: want the slot limit and what it meant", facts)
		}
		bars := eval[int](t, b, `Array.from(document.querySelectorAll('#req-bars .rbar')).filter(e => e.getBoundingClientRect().width > 0).length`)
		passages := eval[int](t, b, `document.querySelectorAll('#app table.passages tbody tr').length`)
		hidden := eval[string](t, b, `document.querySelector('#content').innerText`)
		if bars != 3 || passages != 3 || !strings.Contains(hidden, "hidden") {
			t.Errorf("%d timeline bars drawn (want queue, prefill, decode), %d passages (want 3), content %q", bars, passages, hidden)
		}
		b.shot(t, "request-overload")
		if errs := b.errors(); len(errs) > 0 {
			t.Errorf("browser errors on the request page:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("a request caught in the crash", func(t *testing.T) {
		// From the crash page's list of the requests it caught to the request's page.
		b.do(t, chromedp.Navigate(srv.URL+"/crash?range=1h"), waitLoaded(), chromedp.WaitVisible(`#caught a.reqlink`))
		ids := eval[[]string](t, b, `Array.from(document.querySelectorAll('#caught a.reqlink')).map(a => a.innerText)`)
		if !contains(ids, data.crashed.RequestID) || !contains(ids, data.hung.RequestID) {
			t.Errorf("crash page lists %v as caught, want %s (broken off) and %s (never finished)", ids, data.crashed.RequestID, data.hung.RequestID)
		}
		b.do(t, chromedp.Click(`#caught a.reqlink[href*="`+data.crashed.RequestID+`"]`), chromedp.WaitVisible(`#request`), waitLoaded())
		crash := eval[string](t, b, `(document.querySelector('#crash') || {}).innerText || ''`)
		layer := eval[string](t, b, `(document.querySelector('#error-layer') || {}).innerText || ''`)
		if !strings.Contains(crash, "while it was in flight") || !strings.Contains(crash, "type one") || !strings.Contains(crash, "112.00 MiB") {
			t.Errorf("crash section %q", crash)
		}
		if !strings.Contains(layer, "upstream") {
			t.Errorf("error layer %q", layer)
		}
		b.shot(t, "request-crashed")
		// A request that never finished says so.
		b.do(t, chromedp.Navigate(srv.URL+"/request/"+data.hung.RequestID+"?range=1h"), waitLoaded())
		if badge := eval[string](t, b, `document.getElementById('status-badge').innerText`); badge != "not finished" {
			t.Errorf("hung request's status %q", badge)
		}
		// An unknown id is a clear 404.
		resp := get(t, srv.URL+"/request/chatcmpl-nonesuch?range=1h")
		if resp.status != http.StatusNotFound || !strings.Contains(resp.body, "no request found with id") {
			t.Errorf("unknown id: status %d", resp.status)
		}
		if errs := b.errors("404"); len(errs) > 0 {
			t.Errorf("browser errors:\n%s", strings.Join(errs, "\n"))
		}
	})

	t.Run("sign out", func(t *testing.T) {
		// The session cookie is HttpOnly: the page cannot read it, the browser's protocol can.
		res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{srv.URL}})
		if err != nil {
			t.Fatal(err)
		}
		var session string
		for _, c := range res.Cookies {
			if c.Name == cookieName {
				session = c.Value
			}
		}
		if session == "" {
			t.Fatal("no session cookie in the browser")
		}
		b.do(t, chromedp.Navigate(srv.URL+"/?range=1h"), waitLoaded(), chromedp.Click(`#signout button`), chromedp.WaitVisible(`#signed-out`))
		// The old cookie, replayed, no longer opens anything: the session ended on the server.
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/panels", nil)
		req.AddCookie(&http.Cookie{Name: cookieName, Value: session})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a signed-out session's cookie gets %s, want 401", resp.Status)
		}
	})
}

// page is an HTTP answer read whole.
type page struct {
	status int
	body   string
}

// get reads url with the viewer token.
func get(t *testing.T, u string) page {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return page{resp.StatusCode, string(b)}
}

// TestConsoleClickHouseOutage checks that a console whose ClickHouse does not answer shows a
// clear banner on every page instead of a blank one, and recovers nothing it did not read.
func TestConsoleClickHouseOutage(t *testing.T) {
	ln := httptest.NewServer(http.NotFoundHandler())
	dead := strings.TrimPrefix(ln.URL, "http://")
	ln.Close() // a port nothing listens on any more
	ch := config.ClickHouse{Addr: []string{dead}, Database: "servescope", User: "default", DialTimeout: 2 * time.Second}
	_, srv := startConsole(t, ch, time.Now().UTC(), nil)
	// Unauthenticated /readyz says not ready, and nothing of the database's address or error.
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.TrimSpace(string(body)) != "not ready" {
		t.Errorf("/readyz with ClickHouse down: %s %q, want 503 \"not ready\" and nothing more", resp.Status, body)
	}
	b := newBrowser(t)
	b.do(t, chromedp.Navigate(srv.URL+"/login#token="+testToken), waitLoaded(), chromedp.WaitVisible("#banner"))
	banner := eval[string](t, b, `document.getElementById('banner').innerText`)
	hidden := eval[bool](t, b, `document.getElementById('banner').hidden`)
	if hidden || !strings.Contains(banner, "ClickHouse at "+dead+" is not answering") {
		t.Errorf("dashboard banner %q (hidden %v), want it to name ClickHouse at %s", banner, hidden, dead)
	}
	b.shot(t, "outage-dashboard")
	for _, page := range []string{"/alerts", "/complaint/first-word", "/crash"} {
		b.do(t, chromedp.Navigate(srv.URL+page), waitLoaded())
		banner = eval[string](t, b, `document.getElementById('banner').innerText`)
		if !strings.Contains(banner, "is not answering") {
			t.Errorf("%s: banner %q", page, banner)
		}
	}
	// The failed panel requests (503) are the only errors the browser reports.
	if errs := b.errors("503", "Service Unavailable"); len(errs) > 0 {
		t.Errorf("browser errors during the outage:\n%s", strings.Join(errs, "\n"))
	}
}

// TestPanelBaselinesAreTheComplaintTable checks that a complaint page's panels draw the baseline
// figures its quantities table shows: one baseline on a page, read once.
func TestPanelBaselinesAreTheComplaintTable(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	now := testclock.EvalTime(t, 0)
	seed(t, conn, now)
	_, srv := startConsole(t, ch, now, nil)
	get := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
		}
		return body
	}
	q := "from=" + url.QueryEscape(now.Add(-time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(now.Format(time.RFC3339))
	page := string(get("/complaint/first-word?" + q))
	table := map[string]string{}
	for _, m := range regexp.MustCompile(`<tr data-key="([a-z0-9_]+)"><td>[^<]*</td><td class="[^"]*" data-baseline="([^"]*)">`).FindAllStringSubmatch(page, -1) {
		table[m[1]] = m[2]
	}
	if len(table) < 20 {
		t.Fatalf("the quantities table holds %d baselines: %v", len(table), table)
	}
	// Each panel's baseline line and the table's row of the same quantity.
	lines := map[string]map[string]string{
		"ttft":         {"baseline p95": "ttft_s_p95"},
		"tpot":         {"baseline p95": "tpot_s_p95"},
		"e2e":          {"baseline p95": "e2e_s_p95"},
		"queue":        {"baseline queue wait mean": "queue_s_mean", "baseline waiting (max)": "waiting_max"},
		"running":      {"baseline maximum": "running_max"},
		"kv":           {"baseline maximum": "kv_cache_usage_max"},
		"errors":       {"baseline 4xx": "share_4xx"},
		"retrieval":    {"baseline median": "retrieval_top_score_p50"},
		"wrong_script": {"baseline": "wrong_script_share"},
	}
	compared := 0
	for panel, want := range lines {
		var d PanelData
		if err := json.Unmarshal(get("/api/panel/"+panel+"?"+q), &d); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.Baseline.Text, "the figures of the complaint pages' table") {
			t.Errorf("panel %s states its baseline as %q", panel, d.Baseline.Text)
		}
		for _, l := range d.Lines {
			key, ok := want[l.Label]
			if !ok || l.Kind != "baseline" {
				continue
			}
			for _, v := range []*float64{l.Values[0], l.Values[len(l.Values)-1]} {
				got := ""
				if v != nil {
					got = strconv.FormatFloat(*v, 'g', -1, 64)
				}
				if got != table[key] {
					t.Errorf("panel %s draws %s = %q, the complaint table's %s baseline is %q", panel, l.Label, got, key, table[key])
				}
			}
			compared++
		}
	}
	if compared != 10 {
		t.Errorf("compared %d baseline lines, want 10", compared)
	}
}

// TestPanelAPI checks the JSON the page draws from, without a browser: bearer authentication,
// aligned series, and the baseline at the range's two ends.
func TestPanelAPI(t *testing.T) {
	conn, ch := testenv.ClickHouse(t)
	// The normal day follows the time of day: the instant comes from testclock (pinned by scripts/test).
	now := testclock.EvalTime(t, 0)
	seed(t, conn, now)
	_, srv := startConsole(t, ch, now, nil)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/panel/ttft?range=1h", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d PanelData
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || d.Points == 0 || len(d.Lines) != 4 {
		t.Fatalf("status %d, %d points, lines %+v", resp.StatusCode, d.Points, d.Lines)
	}
	for _, l := range d.Lines {
		if len(l.Values) != len(d.T) {
			t.Fatalf("line %s has %d values for %d timestamps", l.Label, len(l.Values), len(d.T))
		}
		if l.Kind != "series" && (l.Values[0] == nil || l.Values[len(l.Values)-1] == nil) {
			t.Errorf("%s %q is not drawn at both ends of the range", l.Kind, l.Label)
		}
	}
	if d.T[0] != d.From || d.T[len(d.T)-1] != d.To {
		t.Errorf("timestamps run %d..%d, want the range %d..%d", d.T[0], d.T[len(d.T)-1], d.From, d.To)
	}
}
