package testenv

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestNATSServerKeepsStreamAcrossStopAndKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := StartNATS(t)

	nc := natsConnect(t, s.URL())
	sub, err := nc.SubscribeSync("testenv.core")
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := nc.Publish("testenv.core", []byte("ping")); err != nil {
		t.Fatalf("publish: %v", err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("receive core message: %v", err)
	}
	if string(msg.Data) != "ping" {
		t.Fatalf("core message = %q, want %q", msg.Data, "ping")
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     "TESTENV",
		Subjects: []string{"testenv.js.>"},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	if _, err := js.Publish(ctx, "testenv.js.a", []byte("before stop")); err != nil {
		t.Fatalf("publish before stop: %v", err)
	}
	nc.Close()

	s.Stop()
	s.Start()
	nc = natsConnect(t, s.URL())
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream after restart: %v", err)
	}
	if _, err := js.Publish(ctx, "testenv.js.b", []byte("before kill")); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
	nc.Close()

	s.Kill()
	s.Start()
	nc = natsConnect(t, s.URL())
	js, err = jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream after kill: %v", err)
	}
	stream, err := js.Stream(ctx, "TESTENV")
	if err != nil {
		t.Fatalf("stream after kill and restart: %v", err)
	}
	for seq, want := range map[uint64]string{1: "before stop", 2: "before kill"} {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get message %d after restarts: %v", seq, err)
		}
		if string(m.Data) != want {
			t.Errorf("message %d = %q, want %q", seq, m.Data, want)
		}
	}
}

func TestClickHouseServerKeepsRowsAcrossStopAndKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := StartClickHouse(t)

	version := chHTTP(t, s, "SELECT version()")
	if !strings.HasPrefix(version, "26.") {
		t.Fatalf("SELECT version() = %q, want 26.x", version)
	}
	chHTTP(t, s, "CREATE TABLE default.restart_check (id UInt32, note String) ENGINE = MergeTree ORDER BY id")
	chHTTP(t, s, "INSERT INTO default.restart_check VALUES (1, 'before stop')")

	s.Stop()
	s.Start()
	chHTTP(t, s, "INSERT INTO default.restart_check VALUES (2, 'before kill')")

	s.Kill()
	s.Start()
	got := chHTTP(t, s, "SELECT id, note FROM default.restart_check ORDER BY id FORMAT TSV")
	if want := "1\tbefore stop\n2\tbefore kill"; got != want {
		t.Fatalf("rows after restarts = %q, want %q", got, want)
	}

	// Addr must reach the same server over the native protocol.
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}})
	if err != nil {
		t.Fatalf("open native connection to %s: %v", s.Addr(), err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM default.restart_check").Scan(&n); err != nil {
		t.Fatalf("count over native protocol: %v", err)
	}
	if n != 2 {
		t.Fatalf("count over native protocol = %d, want 2", n)
	}
}

func natsConnect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// chHTTP runs one statement over the HTTP interface and returns the answer without the trailing newline.
func chHTTP(t *testing.T, s *ClickHouseServer, query string) string {
	t.Helper()
	resp, err := http.Post(s.HTTPURL()+"/?"+url.Values{"query": {query}}.Encode(), "text/plain", nil)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: read answer: %v", query, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", query, resp.Status, body)
	}
	return strings.TrimRight(string(body), "\n")
}
