package testenv

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
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

	// The engine keeps its own log: each of the three starts wrote its pid there.
	engineLog, err := os.ReadFile(s.EngineLog())
	if err != nil {
		t.Fatalf("read engine log: %v", err)
	}
	if got := strings.Count(string(engineLog), "StatusFile: Writing pid"); got != 3 {
		t.Fatalf("engine log %s has %d start lines (StatusFile: Writing pid), want 3", s.EngineLog(), got)
	}
}

// TestClickHouseServerSurvivesFailedNativeConnections covers what used to end the whole engine
// (clickhouse-local terminates on any exception leaving a connection thread; chlaunch disarms that):
// each failed native connection must leave the server serving the next client.
func TestClickHouseServerSurvivesFailedNativeConnections(t *testing.T) {
	t.Parallel()
	s := StartClickHouse(t)
	tests := []struct {
		name    string
		connect func(ctx context.Context) error
		want    string // in the client's error; empty when the client sees none
	}{
		{"default database does not exist", func(ctx context.Context) error {
			return nativePing(ctx, s, clickhouse.Auth{Database: "no_such_database"})
		}, "no_such_database does not exist"},
		{"wrong password", func(ctx context.Context) error {
			return nativePing(ctx, s, clickhouse.Auth{Username: "default", Password: "wrong"})
		}, "Authentication failed"},
		{"handshake cut short", func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				return err
			}
			// The first bytes of a Hello packet, then a normal close.
			if _, err := c.Write([]byte{0, 10, 'c', 'l', 'i'}); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
			return c.Close()
		}, ""},
		{"connection reset before the handshake", func(ctx context.Context) error {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", s.Addr())
			if err != nil {
				return err
			}
			// Linger 0 makes Close send RST.
			if err := c.(*net.TCPConn).SetLinger(0); err != nil {
				return err
			}
			return c.Close()
		}, ""},
	}
	for _, tc := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := tc.connect(ctx)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		// Give a dying engine time to go, then check that it still serves both protocols.
		time.Sleep(500 * time.Millisecond)
		if err := nativePing(ctx, s, clickhouse.Auth{}); err != nil {
			cancel()
			t.Fatalf("after %s: native ping: %v", tc.name, err)
		}
		cancel()
		if got := chHTTP(t, s, "SELECT 1"); got != "1" {
			t.Fatalf("after %s: SELECT 1 = %q", tc.name, got)
		}
	}
}

// nativePing opens a native protocol connection to s with auth and pings it.
func nativePing(ctx context.Context, s *ClickHouseServer, auth clickhouse.Auth) error {
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{s.Addr()}, Auth: auth, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Ping(ctx)
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
