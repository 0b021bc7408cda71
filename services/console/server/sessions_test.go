package server

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/servescope/servescope/dev/requestfixture"
	"github.com/servescope/servescope/dev/testenv"
)

// TestSessions: a session lives until it is ended or expires, a cookie value proves nothing once
// it has, and the store stays bounded.
func TestSessions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := newSessions(func() time.Time { return now })
	viewer, err := s.create(false)
	if err != nil {
		t.Fatal(err)
	}
	content, _ := s.create(true)
	if ok, c := s.get(viewer); !ok || c {
		t.Errorf("viewer session: live %v content %v", ok, c)
	}
	if ok, c := s.get(content); !ok || !c {
		t.Errorf("content session: live %v content %v", ok, c)
	}
	if ok, _ := s.get("forged-" + viewer); ok {
		t.Error("a forged id is a session")
	}
	s.end(viewer)
	if ok, _ := s.get(viewer); ok {
		t.Error("an ended session still opens")
	}
	now = now.Add(sessionTTL)
	if ok, _ := s.get(content); ok {
		t.Error("an expired session still opens")
	}
	for range maxSessions + 10 {
		if _, err := s.create(false); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.m) > maxSessions {
		t.Errorf("%d sessions kept, at most %d", len(s.m), maxSessions)
	}
}

// TestRequestURLs: a request id with characters that mean something in a URL reaches the page as it
// is, both ways: RequestHref escapes it as one path segment and keeps the view, and the page reads
// it back (an unknown id: a 404 naming it).
func TestRequestURLs(t *testing.T) {
	href := RequestHref("a/b?c#d e", time.Time{}, template.URL("model=x%2Fy&range=6h"))
	u, err := url.Parse(string(href))
	if err != nil || u.EscapedPath() != "/request/a%2Fb%3Fc%23d%20e" || u.Query().Get("model") != "x/y" || u.Query().Get("range") != "6h" {
		t.Fatalf("RequestHref: %q", href)
	}
	conn, ch := testenv.ClickHouse(t)
	now := time.Now().UTC()
	st := requestfixture.Tell(requestfixture.Overload("vllm-0"), now.Add(-5*time.Minute))
	if err := requestfixture.Insert(t.Context(), conn, st.Events...); err != nil {
		t.Fatal(err)
	}
	_, srv := startConsole(t, ch, now, nil)
	for _, c := range []struct {
		path   string
		status int
		want   string
	}{
		{string(href), http.StatusNotFound, `no request found with id &#34;a/b?c#d e&#34;`},
		{"/request/" + st.TraceID + "?range=1h", http.StatusOK, `data-request="` + st.RequestID + `"`},
		{"/request/" + st.RequestID + "?arrival=yesterday", http.StatusBadRequest, "arrival"},
		{"/request?id=" + url.QueryEscape(st.ResponseID) + "&range=6h", http.StatusOK, `data-request="` + st.RequestID + `"`},
		{"/api/request/" + st.ResponseID, http.StatusOK, `"matched_by":"response_id"`},
	} {
		r := get(t, srv.URL+c.path)
		if r.status != c.status || !strings.Contains(r.body, c.want) {
			t.Errorf("GET %s: %d, want %d with %q", c.path, r.status, c.status, c.want)
		}
	}
}
