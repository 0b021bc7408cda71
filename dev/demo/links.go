package demo

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"
)

// Link is one URL an alert carries and what opening it gave.
type Link struct {
	Rule, Kind, URL string
	// Status is the HTTP status (0 when the request failed); Problem says what is wrong ("" when
	// it opened).
	Status  int
	Problem string
}

// OK reports whether the link opened (200).
func (l Link) OK() bool { return l.Problem == "" }

// CheckLinks opens every distinct generatorURL and runbook_url of the alerts received, as an
// on-call engineer would: the generatorURL (the console's alerts page, which needs a login) with
// the console's token, the runbook_url (served without a login) with none. An alert without one
// of them is a problem too.
func CheckLinks(ctx context.Context, alerts []Received, consoleToken string) []Link {
	seen := map[string]bool{}
	var out []Link
	client := &http.Client{Timeout: 30 * time.Second}
	open := func(rule, kind, u, token string) {
		if seen[kind+u] {
			return
		}
		seen[kind+u] = true
		l := Link{Rule: rule, Kind: kind, URL: u}
		if u == "" {
			l.Problem = "the alert has no " + kind
			out = append(out, l)
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			l.Problem = err.Error()
			out = append(out, l)
			return
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			l.Problem = err.Error()
			out = append(out, l)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l.Status = resp.StatusCode
		if resp.StatusCode != http.StatusOK {
			l.Problem = resp.Status
		}
		out = append(out, l)
	}
	for _, a := range alerts {
		open(a.Rule, "generatorURL", a.GeneratorURL, consoleToken)
		open(a.Rule, "runbook_url", a.RunbookURL, "")
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// WriteLinks prints how many of the alerts' links opened and each one that did not.
func WriteLinks(w io.Writer, links []Link) {
	n := map[string]int{}
	ok := map[string]int{}
	for _, l := range links {
		n[l.Kind]++
		if l.OK() {
			ok[l.Kind]++
		}
	}
	fmt.Fprintf(w, "  links: %d of %d generatorURLs (the console's alerts page, logged in) and %d of %d runbook_urls (no login) answered 200\n",
		ok["generatorURL"], n["generatorURL"], ok["runbook_url"], n["runbook_url"])
	for _, l := range links {
		if !l.OK() {
			fmt.Fprintf(w, "    %s %s %s: %s\n", l.Rule, l.Kind, l.URL, l.Problem)
		}
	}
}
