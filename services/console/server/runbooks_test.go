package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/servescope/servescope/dev/testenv"
)

// Every built-in rule's (and the built-in SLO's burn-rate rules') runbook page answers 200 without a login (an alert's runbook_url is opened
// from a pager), holds the rule file's runbook sections (the same text as the alerts' description
// and the panel's action), and draws in a real browser without an error; an unknown rule is 404.
func TestRunbookPages(t *testing.T) {
	_, ch := testenv.ClickHouse(t)
	s, srv := startConsole(t, ch, time.Now(), nil)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	n := 0
	for _, d := range s.rules {
		if d.Runbook == nil {
			t.Errorf("built-in rule %s has no runbook", d.Name)
			continue
		}
		n++
		status, body := get("/runbooks/" + d.Name)
		if status != http.StatusOK {
			t.Errorf("/runbooks/%s without a login: %d", d.Name, status)
			continue
		}
		for _, want := range []string{"Runbook: " + d.Name, "What fired", "Confirm", "What to do", "What not to do",
			htmlText(oneLine(d.Runbook.Action)), htmlText(strings.TrimSpace(d.Runbook.Query))} {
			if !strings.Contains(body, want) {
				t.Errorf("/runbooks/%s lacks %q", d.Name, want)
			}
		}
	}
	if n != 16 {
		t.Errorf("%d runbooks, want the 14 built-in rules' and the built-in SLO's 2", n)
	}
	if status, body := get("/runbooks"); status != http.StatusOK || strings.Count(body, `<a href="/runbooks/`) != n {
		t.Errorf("/runbooks: %d, %d links, want 200 and %d", status, strings.Count(body, `<a href="/runbooks/`), n)
	}
	if status, _ := get("/runbooks/no_such_rule"); status != http.StatusNotFound {
		t.Errorf("/runbooks/no_such_rule: %d, want 404", status)
	}
	// The rest of the console still needs the login.
	if status, body := get("/alerts?rule=requests_hung"); status != http.StatusOK || !strings.Contains(body, `name="token"`) {
		t.Errorf("/alerts without a login: %d, want the login page", status)
	}

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(srv.URL+"/runbooks/requests_hung"), chromedp.WaitReady(`#avoid`))
	title := eval[string](t, b, `document.getElementById('runbook-title').innerText`)
	query := eval[string](t, b, `document.getElementById('query').innerText`)
	if title != "Runbook: requests_hung" || !strings.Contains(query, "gateway_heartbeats") {
		t.Errorf("runbook page: title %q, query %q", title, query)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors on the runbook page:\n%s", strings.Join(errs, "\n"))
	}
	shotPNG(t, b, "runbook")
	b.do(t, chromedp.Navigate(srv.URL+"/runbooks/latency_p95"), chromedp.WaitReady(`#avoid`))
	if cases := eval[int](t, b, `document.querySelectorAll('#action li').length`); cases != 3 {
		t.Errorf("latency_p95's runbook shows %d cases, want 3 (ttft_s, tpot_s, e2e_s)", cases)
	}
	shotPNG(t, b, "runbook-cases")
	b.do(t, chromedp.Navigate(srv.URL+"/runbooks"), chromedp.WaitReady(`#runbooks`))
	shotPNG(t, b, "runbooks")
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser errors on the runbook pages:\n%s", strings.Join(errs, "\n"))
	}
}

// htmlText is s as html/template writes it in element text.
func htmlText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "+", "&#43;").Replace(s)
}

// shotPNG saves a full-page PNG screenshot (quality 100 makes Chromium encode PNG) beside the
// JPEG ones of b.shot.
func shotPNG(t *testing.T, b *browser, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(screenshotDir(t), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}
