package proxy

import (
	"net/http"
	"testing"
)

func TestTraceparent(t *testing.T) {
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		in        string
		keep      bool
		wantTrace string
	}{
		{valid, true, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"", false, ""},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, ""},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, ""},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, ""}, // upper case is invalid
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false, ""},
	}
	for _, tc := range tests {
		h, trace := traceparent(tc.in)
		if tc.keep {
			if h != tc.in || trace != tc.wantTrace {
				t.Errorf("%q: got %q %q, want it kept", tc.in, h, trace)
			}
			continue
		}
		if !validTraceparent(h) || h[3:35] != trace || h == tc.in {
			t.Errorf("%q: made %q (trace %q), want a new valid header", tc.in, h, trace)
		}
	}
	a, _ := traceparent("")
	b, _ := traceparent("")
	if a == b {
		t.Error("two new traceparents are equal")
	}
}

func TestCopyHeadersDropsHopByHop(t *testing.T) {
	src := http.Header{
		"Connection":    {"keep-alive, X-Secret-Hop"},
		"X-Secret-Hop":  {"1"},
		"Keep-Alive":    {"timeout=5"},
		"Upgrade":       {"h2c"},
		"Authorization": {"Bearer k"},
		"Content-Type":  {"application/json"},
	}
	dst := http.Header{}
	copyHeaders(dst, src)
	for _, k := range []string{"Connection", "X-Secret-Hop", "Keep-Alive", "Upgrade"} {
		if _, ok := dst[k]; ok {
			t.Errorf("%s forwarded", k)
		}
	}
	for _, k := range []string{"Authorization", "Content-Type"} {
		if dst.Get(k) != src.Get(k) {
			t.Errorf("%s not forwarded", k)
		}
	}
}

func TestBalancer(t *testing.T) {
	urls, err := ParseUpstreams("http://a:8000, http://b:8000/,http://c:8000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseUpstreams("ftp://x"); err == nil {
		t.Error("ftp upstream accepted")
	}
	if _, err := ParseUpstreams(" , "); err == nil {
		t.Error("empty upstream list accepted")
	}
	rr, _ := newBalancer(urls, PolicyRoundRobin)
	seen := map[string]int{}
	for range 30 {
		u := rr.pick()
		seen[u.url.Host]++
		u.release()
	}
	if seen["a:8000"] != 10 || seen["b:8000"] != 10 || seen["c:8000"] != 10 {
		t.Errorf("round robin spread %v", seen)
	}
	lf, _ := newBalancer(urls, PolicyLeastInFlight)
	held := []*upstream{lf.pick(), lf.pick()} // two engines busy
	free := lf.pick()
	for _, h := range held {
		if h == free {
			t.Fatalf("least-in-flight picked a busy engine %s", free.url.Host)
		}
	}
	free.release()
	for range 5 {
		u := lf.pick()
		if u != free {
			t.Fatalf("least-in-flight picked %s, want the idle %s", u.url.Host, free.url.Host)
		}
		u.release()
	}
	if _, err := newBalancer(urls, "random"); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestRouteOf(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions": RouteChat, "/v1/completions": RouteCompletions,
		"/v1/models": RouteOther, "/v1/chat/completions/x": RouteOther,
	} {
		if got := routeOf(path); got != want {
			t.Errorf("routeOf(%q) = %q, want %q", path, got, want)
		}
	}
}
