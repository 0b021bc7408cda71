package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type both struct {
	NATS       NATS
	ClickHouse ClickHouse
	Port       int `env:"TEST_SERVICE_PORT" envDefault:"1"`
}

func TestDefaults(t *testing.T) {
	cfg, err := LoadFrom[both](map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	// The stream limits stay unset: the setup step applies its defaults, a service compares only
	// what it is given.
	if cfg.NATS.URL != "nats://127.0.0.1:4222" || cfg.NATS.SubjectPrefix != "servescope" || cfg.NATS.SetupWait != 2*time.Minute ||
		cfg.NATS.StreamReplicas != 0 || cfg.NATS.StreamMaxAge != 0 || cfg.NATS.StreamMaxBytes != 0 {
		t.Errorf("NATS defaults: %+v", cfg.NATS)
	}
	if len(cfg.ClickHouse.Addr) != 1 || cfg.ClickHouse.Addr[0] != "127.0.0.1:9000" || cfg.ClickHouse.Database != "servescope" || cfg.ClickHouse.User != "default" {
		t.Errorf("ClickHouse defaults: %+v", cfg.ClickHouse)
	}
}

func TestInvalidValuesNameTheVariable(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"SERVESCOPE_STREAM_REPLICAS": "2"}, "SERVESCOPE_STREAM_REPLICAS: must be 1 or 3"},
		{map[string]string{"SERVESCOPE_STREAM_REPLICAS": "three"}, "SERVESCOPE_STREAM_REPLICAS: invalid value"},
		{map[string]string{"SERVESCOPE_STREAM_MAX_AGE": "soon"}, "SERVESCOPE_STREAM_MAX_AGE: invalid value"},
		{map[string]string{"SERVESCOPE_STREAM_MAX_BYTES": "-1"}, "SERVESCOPE_STREAM_MAX_BYTES: must be positive"},
		{map[string]string{"SERVESCOPE_SETUP_WAIT": "-1s"}, "SERVESCOPE_SETUP_WAIT: must not be negative"},
		{map[string]string{"SERVESCOPE_NATS_URL": "::not a url"}, "SERVESCOPE_NATS_URL"},
		{map[string]string{"SERVESCOPE_CLICKHOUSE_ADDR": "localhost"}, "SERVESCOPE_CLICKHOUSE_ADDR: \"localhost\" is not host:port"},
		{map[string]string{"SERVESCOPE_CLICKHOUSE_ADDR": "http://127.0.0.1:8123"}, "SERVESCOPE_CLICKHOUSE_ADDR: \"http://127.0.0.1:8123\" is not host:port"},
		{map[string]string{"SERVESCOPE_CLICKHOUSE_DATABASE": "x; DROP TABLE y"}, "SERVESCOPE_CLICKHOUSE_DATABASE"},
		{map[string]string{"SERVESCOPE_SUBJECT_PREFIX": "Bad.Prefix"}, "SERVESCOPE_SUBJECT_PREFIX"},
		{map[string]string{"SERVESCOPE_CLICKHOUSE_CLUSTER": "two shards"}, "SERVESCOPE_CLICKHOUSE_CLUSTER"},
		{map[string]string{"TEST_SERVICE_PORT": "eighty"}, "TEST_SERVICE_PORT: invalid value"},
		{map[string]string{"SERVESCOPE_NATS_TLS_CERT": "/c.pem"}, "SERVESCOPE_NATS_TLS_CERT and SERVESCOPE_NATS_TLS_KEY"},
	}
	for _, c := range cases {
		_, err := LoadFrom[both](c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("env %v: error %v, want it to contain %q", c.env, err, c.want)
		}
	}
}

func TestValidationReportedOnce(t *testing.T) {
	type embedded struct{ NATS }
	_, err := LoadFrom[embedded](map[string]string{"SERVESCOPE_STREAM_REPLICAS": "2"})
	if err == nil || strings.Count(err.Error(), "SERVESCOPE_STREAM_REPLICAS") != 1 {
		t.Fatalf("want the error once, got %v", err)
	}
}

func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadFrom[both](map[string]string{"SERVESCOPE_CLICKHOUSE_PASSWORD_FILE": pw, "SERVESCOPE_CLICKHOUSE_PASSWORD": "ignored"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.ClickHouse.Options()
	if err != nil {
		t.Fatal(err)
	}
	if o.Auth.Password != "s3cret" {
		t.Errorf("password from file = %q, want s3cret", o.Auth.Password)
	}
	cfg.NATS.TokenFile = filepath.Join(dir, "missing")
	if _, err := cfg.NATS.Options("x"); err == nil || !strings.Contains(err.Error(), "SERVESCOPE_NATS_TOKEN_FILE") {
		t.Errorf("missing token file: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	got := RedactURL("nats://svc:hunter2@a:4222, nats://b:4222")
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "nats://svc:xxxxx@a:4222") || !strings.Contains(got, "nats://b:4222") {
		t.Errorf("RedactURL = %q", got)
	}
	_, err := LoadFrom[NATS](map[string]string{"SERVESCOPE_NATS_URL": "nats://svc:hunter2@ bad host:4222"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("invalid URL error leaks or is missing: %v", err)
	}
}

type withConsumer struct {
	NATS     NATS
	Consumer Consumer
}

// TestConsumerSettings: the consumer's settings, read by the consumer and by the setup step,
// with their defaults, their checks, and the durable consumer they size.
func TestConsumerSettings(t *testing.T) {
	cfg, err := LoadFrom[withConsumer](map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Consumer; c.Durable != "servescope-writer" || c.BatchRows != 10000 || c.FlushInterval != time.Second {
		t.Errorf("defaults: %+v", c)
	}
	if d := cfg.Consumer.DurableConsumer(); d.Name != "servescope-writer" || d.MaxAckPending != 41000 || d.AckWait != 30*time.Second {
		t.Errorf("durable consumer: %+v", d)
	}
	for env, want := range map[string]string{
		"CONSUMER_DURABLE":        "CONSUMER_DURABLE: \"a.b\" must be",
		"CONSUMER_BATCH_ROWS":     "CONSUMER_BATCH_ROWS: must be between",
		"CONSUMER_FLUSH_INTERVAL": "CONSUMER_FLUSH_INTERVAL: must be at least 1ms",
	} {
		bad := map[string]string{"CONSUMER_DURABLE": "a.b", "CONSUMER_BATCH_ROWS": "0", "CONSUMER_FLUSH_INTERVAL": "0s"}
		_, err := LoadFrom[withConsumer](map[string]string{env: bad[env]})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v, want %q", env, bad[env], err, want)
		}
	}
}

// On a cluster every insert is synchronous, so that an acknowledged insert is on its shard, and
// the shards apply the user's own roles; on one server no setting is sent.
func TestClickHouseClusterInsertsAreSynchronous(t *testing.T) {
	for _, c := range []struct {
		cluster string
		want    any
	}{{"", nil}, {"servescope", 1}} {
		cfg, err := LoadFrom[ClickHouse](map[string]string{"SERVESCOPE_CLICKHOUSE_CLUSTER": c.cluster})
		if err != nil {
			t.Fatal(err)
		}
		o, err := cfg.Options()
		if err != nil {
			t.Fatal(err)
		}
		if got := o.Settings["distributed_foreground_insert"]; got != c.want {
			t.Errorf("cluster %q: distributed_foreground_insert = %v, want %v", c.cluster, got, c.want)
		}
		wantRoles := any(nil)
		if c.cluster != "" {
			wantRoles = 0
		}
		if got := o.Settings["push_external_roles_in_interserver_queries"]; got != wantRoles {
			t.Errorf("cluster %q: push_external_roles_in_interserver_queries = %v, want %v", c.cluster, got, wantRoles)
		}
	}
}
