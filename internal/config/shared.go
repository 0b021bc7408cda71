package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/nats-io/nats.go"

	"github.com/servescope/servescope/internal/bus"
)

// NATS holds the settings every service uses to reach NATS JetStream.
type NATS struct {
	// URL is one or more comma-separated server URLs.
	URL string `env:"SERVESCOPE_NATS_URL" envDefault:"nats://127.0.0.1:4222"`
	// User and Password authenticate with a user/password pair.
	User     string `env:"SERVESCOPE_NATS_USER"`
	Password string `env:"SERVESCOPE_NATS_PASSWORD"`
	// PasswordFile, when set, is read for the password (Docker/Kubernetes secrets).
	PasswordFile string `env:"SERVESCOPE_NATS_PASSWORD_FILE"`
	// Token authenticates with a token.
	Token     string `env:"SERVESCOPE_NATS_TOKEN"`
	TokenFile string `env:"SERVESCOPE_NATS_TOKEN_FILE"`
	// CredsFile is a NATS .creds file (JWT + nkey seed).
	CredsFile string `env:"SERVESCOPE_NATS_CREDS_FILE"`
	// TLS turns on TLS; TLSCA, TLSCert and TLSKey are PEM files (TLSCert and TLSKey for mutual TLS).
	TLS     bool   `env:"SERVESCOPE_NATS_TLS"`
	TLSCA   string `env:"SERVESCOPE_NATS_TLS_CA"`
	TLSCert string `env:"SERVESCOPE_NATS_TLS_CERT"`
	TLSKey  string `env:"SERVESCOPE_NATS_TLS_KEY"`
	// SubjectPrefix is the first token of every subject and the base of the stream names:
	// "servescope" gives subjects servescope.v1.> and streams SERVESCOPE and SERVESCOPE_DLQ.
	SubjectPrefix string `env:"SERVESCOPE_SUBJECT_PREFIX" envDefault:"servescope"`
	// StreamMaxAge, StreamMaxBytes and StreamReplicas are the events stream's limits. They are
	// applied by the setup step (`servescope migrate up`, `servescope streams up`), the one owner
	// of the streams, which uses 168h, 10 GiB and 1 for the ones left unset. A service never
	// changes a stream: given one of them, it compares it with the stream it finds and logs a
	// difference (the stream's value stays in force). Zero means unset.
	StreamMaxAge time.Duration `env:"SERVESCOPE_STREAM_MAX_AGE"`
	// StreamMaxBytes caps the events stream's size in bytes; the oldest messages go first.
	StreamMaxBytes int64 `env:"SERVESCOPE_STREAM_MAX_BYTES"`
	// StreamReplicas is the streams' replica count: 1, or 3 on a NATS cluster.
	StreamReplicas int `env:"SERVESCOPE_STREAM_REPLICAS"`
	// LeaseTTL is the lease bucket's TTL (the setup step uses 15s when unset): how long the lease
	// of an instance that died keeps a job (the detector's notifications, an engine's scrapes)
	// from the instance that takes over. Services read the bucket's own TTL.
	LeaseTTL time.Duration `env:"SERVESCOPE_LEASE_TTL"`
	// SetupWait is how long a service waits at start for the streams (and the consumer for its
	// durable consumer) that the setup step creates before it reports them missing as an error:
	// the consumer then exits, a publisher keeps spooling its events and checking.
	SetupWait time.Duration `env:"SERVESCOPE_SETUP_WAIT" envDefault:"2m"`
}

// Topology returns the stream and subject names derived from n's subject prefix.
func (n *NATS) Topology() bus.Topology { return bus.Topology{Prefix: n.SubjectPrefix} }

// StreamSettings returns the stream limits set in n; unset ones are zero.
func (n *NATS) StreamSettings() bus.StreamSettings {
	return bus.StreamSettings{MaxAge: n.StreamMaxAge, MaxBytes: n.StreamMaxBytes, Replicas: n.StreamReplicas, LeaseTTL: n.LeaseTTL}
}

var userinfoRE = regexp.MustCompile(`(//[^:/@]*:)[^@]*@`)

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// Validate implements Validator.
func (n *NATS) Validate() error {
	for _, u := range strings.Split(n.URL, ",") {
		p, err := url.Parse(strings.TrimSpace(u))
		if err != nil || p.Host == "" {
			return fmt.Errorf("SERVESCOPE_NATS_URL: %q is not a URL like nats://host:4222", RedactURL(u))
		}
	}
	if n.StreamReplicas != 0 && n.StreamReplicas != 1 && n.StreamReplicas != 3 {
		return fmt.Errorf("SERVESCOPE_STREAM_REPLICAS: must be 1 or 3, got %d", n.StreamReplicas)
	}
	if n.StreamMaxAge < 0 {
		return fmt.Errorf("SERVESCOPE_STREAM_MAX_AGE: must be positive, got %s", n.StreamMaxAge)
	}
	if n.StreamMaxBytes < 0 {
		return fmt.Errorf("SERVESCOPE_STREAM_MAX_BYTES: must be positive, got %d", n.StreamMaxBytes)
	}
	if n.LeaseTTL != 0 && n.LeaseTTL < time.Second {
		return fmt.Errorf("SERVESCOPE_LEASE_TTL: must be at least 1s, got %s", n.LeaseTTL)
	}
	if n.SetupWait < 0 {
		return fmt.Errorf("SERVESCOPE_SETUP_WAIT: must not be negative, got %s", n.SetupWait)
	}
	if !prefixRE.MatchString(n.SubjectPrefix) {
		return fmt.Errorf("SERVESCOPE_SUBJECT_PREFIX: %q must be lower-case letters, digits, _ or -", n.SubjectPrefix)
	}
	if (n.TLSCert == "") != (n.TLSKey == "") {
		return fmt.Errorf("SERVESCOPE_NATS_TLS_CERT and SERVESCOPE_NATS_TLS_KEY must be set together")
	}
	return nil
}

// Options returns the nats.go options for these settings, reading secret files. name is the
// client connection name shown by the server's monitoring.
func (n *NATS) Options(name string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name)}
	password, err := secret(n.Password, n.PasswordFile, "SERVESCOPE_NATS_PASSWORD_FILE")
	if err != nil {
		return nil, err
	}
	token, err := secret(n.Token, n.TokenFile, "SERVESCOPE_NATS_TOKEN_FILE")
	if err != nil {
		return nil, err
	}
	if n.User != "" {
		opts = append(opts, nats.UserInfo(n.User, password))
	}
	if token != "" {
		opts = append(opts, nats.Token(token))
	}
	if n.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	if n.TLS || n.TLSCA != "" || n.TLSCert != "" {
		cfg, err := tlsConfig(n.TLSCA, n.TLSCert, n.TLSKey, "SERVESCOPE_NATS_TLS")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(cfg))
	}
	return opts, nil
}

// Connect connects to NATS with these settings plus extra options (reconnect policy, handlers).
// Connection events are logged to slog.Default() unless extra options replace the handlers: a
// refused authorization closes the connection for good, and without the closed handler's log
// line nothing would say why events stopped flowing.
func (n *NATS) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := n.Options(name)
	if err != nil {
		return nil, err
	}
	opts = append(opts, NATSEventHandlers(slog.Default(), RedactURL(n.URL))...)
	nc, err := nats.Connect(n.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(n.URL), err)
	}
	return nc, nil
}

// NATSEventHandlers returns nats.go options that log disconnects, reconnects, asynchronous
// errors (e.g. permission violations) and the final close with its cause.
func NATSEventHandlers(log *slog.Logger, url string) []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "url", url, "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("NATS reconnected", "url", RedactURL(c.ConnectedUrl()))
		}),
		nats.ErrorHandler(func(c *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("NATS error", "url", url, "err", err)
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			if err := c.LastError(); err != nil {
				log.Error("NATS connection closed; no more events will be published or consumed", "url", url, "err", err)
			}
		}),
	}
}

// RedactURL returns the comma-separated URLs in u with any password replaced by "xxxxx", for
// logs and error messages.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if parsed, err := url.Parse(strings.TrimSpace(p)); err == nil && parsed.User != nil {
			parts[i] = parsed.Redacted()
		} else if err != nil {
			// Not parseable, so redact by shape: whatever sits between "user:" and "@".
			parts[i] = userinfoRE.ReplaceAllString(p, "${1}xxxxx@")
		}
	}
	return strings.Join(parts, ",")
}

// Consumer holds the settings that shape the consumer's durable consumer. The consumer reads them
// to batch, and the setup step (`servescope migrate up`) to create the durable consumer with the
// AckWait and MaxAckPending they imply (package services/consumer/pipeline gives the formulas).
type Consumer struct {
	// Durable is the durable consumer's name; every instance with the same name shares the work.
	Durable string `env:"CONSUMER_DURABLE" envDefault:"servescope-writer"`
	// BatchRows is the row count at which a table's batch is inserted.
	BatchRows int `env:"CONSUMER_BATCH_ROWS" envDefault:"10000"`
	// FlushInterval is the longest a row waits in a batch before the batch is inserted.
	FlushInterval time.Duration `env:"CONSUMER_FLUSH_INTERVAL" envDefault:"1s"`
}

// Validate implements Validator.
func (c *Consumer) Validate() error {
	if c.Durable == "" || strings.ContainsAny(c.Durable, ". *>\t\r\n") {
		return fmt.Errorf("CONSUMER_DURABLE: %q must be a non-empty name without '.', '*', '>' or spaces", c.Durable)
	}
	if c.BatchRows < 1 || c.BatchRows > 1_000_000 {
		return fmt.Errorf("CONSUMER_BATCH_ROWS: must be between 1 and 1000000, got %d", c.BatchRows)
	}
	if c.FlushInterval < time.Millisecond {
		return fmt.Errorf("CONSUMER_FLUSH_INTERVAL: must be at least 1ms, got %s", c.FlushInterval)
	}
	return nil
}

// DurableConsumer returns the durable consumer c configures, sized by bus.DurableFor.
func (c *Consumer) DurableConsumer() bus.Durable {
	return bus.DurableFor(c.Durable, c.BatchRows, c.FlushInterval)
}

// ClickHouse holds the settings every service uses to reach ClickHouse over the native protocol.
type ClickHouse struct {
	// Addr is one or more comma-separated host:port native-protocol addresses.
	Addr []string `env:"SERVESCOPE_CLICKHOUSE_ADDR" envDefault:"127.0.0.1:9000" envSeparator:","`
	// Database holds servescope's tables.
	Database string `env:"SERVESCOPE_CLICKHOUSE_DATABASE" envDefault:"servescope"`
	// User and Password authenticate; PasswordFile, when set, is read for the password.
	User         string `env:"SERVESCOPE_CLICKHOUSE_USER" envDefault:"default"`
	Password     string `env:"SERVESCOPE_CLICKHOUSE_PASSWORD"`
	PasswordFile string `env:"SERVESCOPE_CLICKHOUSE_PASSWORD_FILE"`
	// TLS turns on TLS (the server's secure native port, usually 9440); TLSCA is a PEM CA file.
	TLS   bool   `env:"SERVESCOPE_CLICKHOUSE_TLS"`
	TLSCA string `env:"SERVESCOPE_CLICKHOUSE_TLS_CA"`
	// DialTimeout bounds connecting.
	DialTimeout time.Duration `env:"SERVESCOPE_CLICKHOUSE_DIAL_TIMEOUT" envDefault:"5s"`
	// Cluster, when set, names the servers' remote_servers cluster the schema is sharded on:
	// Database holds Distributed tables over per-node tables in Database_local (see chstore's
	// MigrateSharded), every insert is synchronous (distributed_foreground_insert=1), so an
	// insert returns only once the target shard holds its rows, and a query sent on to the
	// shards runs there with the user's own roles (push_external_roles_in_interserver_queries=0).
	// Empty: one server.
	Cluster string `env:"SERVESCOPE_CLICKHOUSE_CLUSTER"`
	// Replicated, with Cluster, makes the per-node tables Replicated…MergeTree, each at the
	// Keeper path /clickhouse/tables/{shard}/<database>_local/<table> as replica {replica}: every
	// node needs the macros shard and replica and a ZooKeeper or ClickHouse Keeper in its config.
	// False: plain …MergeTree tables, one copy per shard.
	Replicated bool `env:"SERVESCOPE_CLICKHOUSE_REPLICATED"`
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// Validate implements Validator.
func (c *ClickHouse) Validate() error {
	if len(c.Addr) == 0 {
		return fmt.Errorf("SERVESCOPE_CLICKHOUSE_ADDR: must name at least one host:port")
	}
	for _, a := range c.Addr {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" || strings.Contains(a, "/") {
			return fmt.Errorf("SERVESCOPE_CLICKHOUSE_ADDR: %q is not host:port (the native protocol's address, e.g. 127.0.0.1:9000, no scheme)", a)
		}
	}
	if !identRE.MatchString(c.Database) {
		return fmt.Errorf("SERVESCOPE_CLICKHOUSE_DATABASE: %q is not a plain identifier", c.Database)
	}
	if c.Cluster != "" && !identRE.MatchString(c.Cluster) {
		return fmt.Errorf("SERVESCOPE_CLICKHOUSE_CLUSTER: %q is not a plain identifier", c.Cluster)
	}
	if c.Replicated && c.Cluster == "" {
		return fmt.Errorf("SERVESCOPE_CLICKHOUSE_REPLICATED needs SERVESCOPE_CLICKHOUSE_CLUSTER: replicas are the nodes of a cluster's shards")
	}
	return nil
}

// Options returns clickhouse-go options for these settings, reading secret files.
func (c *ClickHouse) Options() (*clickhouse.Options, error) {
	password, err := secret(c.Password, c.PasswordFile, "SERVESCOPE_CLICKHOUSE_PASSWORD_FILE")
	if err != nil {
		return nil, err
	}
	o := &clickhouse.Options{
		Addr:        c.Addr,
		Auth:        clickhouse.Auth{Database: c.Database, Username: c.User, Password: password},
		DialTimeout: c.DialTimeout,
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	}
	if c.Cluster != "" {
		o.Settings = clickhouse.Settings{
			// An insert into a Distributed table otherwise returns once the rows are queued on
			// the node that took it, before the shard holds them: the consumer would acknowledge
			// messages whose rows a node's loss can still take.
			"distributed_foreground_insert": 1,
			// A query a node sends the other shards runs there as the user who asked (the
			// cluster's secret) with that user's own roles on that node. ClickHouse's default
			// (1) sends the asking node's current roles instead, which the shards did not apply
			// to the cluster table function's queries nor to a subquery sent on to the shards
			// (retrieval_score_drift's IN): a role-based account (servescope access) got code 497
			// for its own grants there.
			"push_external_roles_in_interserver_queries": 0,
		}
	}
	if c.TLS || c.TLSCA != "" {
		cfg, err := tlsConfig(c.TLSCA, "", "", "SERVESCOPE_CLICKHOUSE_TLS")
		if err != nil {
			return nil, err
		}
		o.TLS = cfg
	}
	return o, nil
}

// secret returns value, or the trimmed content of file when file is set.
func secret(value, file, fileVar string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: read secret file: %w", fileVar, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func tlsConfig(caFile, certFile, keyFile, varPrefix string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CA: read CA file: %w", varPrefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA: %s holds no PEM certificate", varPrefix, caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT/%s_KEY: load key pair: %w", varPrefix, varPrefix, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
