package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// TestTemplatesParse renders nothing but catches html/template's context errors at test time
// rather than on a viewer's first page.
func TestTemplatesParse(t *testing.T) {
	p, err := newPages()
	if err != nil {
		t.Fatal(err)
	}
	for name, tpl := range p.t {
		var b nopWriter
		if err := tpl.ExecuteTemplate(&b, "base", pageData{Title: name, Nav: name, Complaints: Complaints, Complaint: &Complaints[0], Presets: []string{"1h"}}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }

// A read that fails because one shard of a cluster does not answer is said as such, naming the
// panel (or what the page was reading) and the shard, not as ClickHouse's whole outage.
func TestShardDownMessage(t *testing.T) {
	err := fmt.Errorf("panel ttft: series rows: %w", &clickhouse.Exception{Code: 279,
		Message: "All connection tries failed. Log: \n\nCode: 210. DB::NetException: Connection refused (127.0.0.1:39153). (NETWORK_ERROR)"})
	for what, want := range map[string]string{
		"":                   "panel ttft cannot be read: the ClickHouse shard at 127.0.0.1:39153 does not answer",
		"diagnose's reading": "diagnose's reading cannot be read: the ClickHouse shard at 127.0.0.1:39153 does not answer",
	} {
		if got := shardDown(what, err); !strings.HasPrefix(got, want) {
			t.Errorf("shardDown(%q) = %q, want it to start with %q", what, got, want)
		}
	}
}
