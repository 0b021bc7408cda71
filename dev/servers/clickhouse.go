package servers

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// ClickHouse describes the ClickHouse engine of libchdb.so run by the chlaunch launcher on
// 127.0.0.1. Launcher, Lib, the ports, DataDir, ConfigFile, EngineLog, EngineErrorLog and Log are
// required.
//
// The launcher's quirks, which the Spec accounts for: it must run in its own process group and
// exits at once on SIGTERM (the engine's own graceful cancel would wait 5 s for connected
// clients, then exit 1; acknowledged inserts are on disk already); a failed start (port taken:
// "Code: 210 ... Address already in use"; data directory in use: "Code: 76 ... Cannot lock file")
// ends it within ~50 ms with the message on its stderr, which is Log; readiness is an HTTP
// `SELECT 1`, never a bare TCP connect. A fatal signal in the engine ends the process with no
// line in Log: the engine writes its report (signal, query, stack) only to EngineErrorLog.
type ClickHouse struct {
	// Launcher is chlaunch (Installed.Chlaunch); Lib is libchdb.so (Installed.Libchdb).
	Launcher, Lib string
	// TCPPort takes the native protocol, HTTPPort the HTTP interface.
	TCPPort, HTTPPort int
	// DataDir holds the databases: tables and acknowledged inserts survive a restart.
	DataDir string
	// ConfigFile is the engine's config, written by Prepare: its <logger> section sends the
	// engine's own log to EngineLog at LogLevel and its errors to EngineErrorLog, both rotated
	// by the engine with proc.DefaultRotation's size and count. Without it the engine logs
	// nothing, and a crash leaves no trace.
	ConfigFile, EngineLog, EngineErrorLog string
	// LogLevel is the engine's log level: fatal .. information, debug, trace (information when
	// empty).
	LogLevel string
	// UsersFile, when set, is a users.xml (a whole <clickhouse> document with <users>, <roles>,
	// <profiles>, <quotas>) the engine takes its users from. libchdb's engine has only this
	// read-only access storage: CREATE USER fails there. It must keep a `default` user without
	// password, which the readiness check uses.
	UsersFile string
	// Clusters, when set, is the config's <remote_servers>: each cluster's shards, each shard's
	// replicas by native-protocol address (host:port). A Distributed table names one of them.
	// Shards declare internal_replication, so with Replicated tables a Distributed insert goes to
	// one replica of a shard and replication does the rest. Replicas name no <default_database>:
	// with one, a node does not take itself for a replica of its own shard (every insert and read
	// of its own rows goes through a connection to itself, and an asynchronous insert queues them).
	Clusters map[string][][]string
	// ClusterSecret, when set, is every cluster's <secret>: the nodes trust each other with it, and
	// a query one sends to another runs there as the user who asked it (without a secret, as the
	// replica's <user>, the default user), as deploy/clickhouse/cluster/config.d/remote_servers.xml
	// has it.
	ClusterSecret string
	// Macros, when set, is the config's <macros> (e.g. shard, replica): the values
	// {shard} and {replica} take in Replicated table paths and in ON CLUSTER DDL.
	Macros map[string]string
	// ZooKeeper, when set, is the config's <zookeeper>: the coordination nodes (host:port) that
	// Replicated tables keep their parts' log in (a ZooKeeper, or ClickHouse Keeper).
	ZooKeeper []string
	// Log receives the launcher's output; PidFile, when set, records its pid (see proc.Spec).
	Log, PidFile string
	// ReadyTimeout and StopGrace as in proc.Spec (its defaults when 0).
	ReadyTimeout, StopGrace time.Duration
	// OnCrash is called when the server exits on its own (see proc.Spec.OnCrash).
	OnCrash func(error)
	// DieWithCaller ends the server with the caller's process (see proc.Spec.DieWithCaller).
	DieWithCaller bool
}

// Addr is the native protocol address, 127.0.0.1:<TCPPort>.
func (c ClickHouse) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.TCPPort) }

// HTTPURL is the HTTP interface's base URL, http://127.0.0.1:<HTTPPort>, without a slash.
func (c ClickHouse) HTTPURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.HTTPPort) }

func (c ClickHouse) logLevel() string {
	if c.LogLevel == "" {
		return "information"
	}
	return c.LogLevel
}

// Healthy succeeds when HTTP `SELECT 1` answers 1 (with UsersFile: when system.users lists at
// least one user, so a test can log in as one at once).
func (c ClickHouse) Healthy(ctx context.Context) error {
	query, want := "SELECT 1", "1"
	if c.UsersFile != "" {
		query, want = "SELECT count() > 0 FROM system.users", "1"
	}
	body, err := httpGet(ctx, c.HTTPURL()+"/?"+url.Values{"query": {query}}.Encode())
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(body); got != want {
		return fmt.Errorf("%s answered %q", query, got)
	}
	return nil
}

// Args are chlaunch's arguments.
func (c ClickHouse) Args() []string {
	return []string{
		"--lib", c.Lib,
		"--path", c.DataDir,
		"--tcp-port", strconv.Itoa(c.TCPPort),
		"--http-port", strconv.Itoa(c.HTTPPort),
		"--listen-host", "127.0.0.1",
		"--config", c.ConfigFile,
		"--log-level", c.logLevel(),
	}
}

func (c ClickHouse) check() error {
	for _, f := range []struct{ name, v string }{
		{"Launcher", c.Launcher}, {"Lib", c.Lib}, {"DataDir", c.DataDir}, {"ConfigFile", c.ConfigFile},
		{"EngineLog", c.EngineLog}, {"EngineErrorLog", c.EngineErrorLog}, {"Log", c.Log},
	} {
		if f.v == "" {
			return fmt.Errorf("servers: ClickHouse.%s is empty", f.name)
		}
	}
	for name, shards := range c.Clusters {
		if !xmlNameRE.MatchString(name) || len(shards) == 0 {
			return fmt.Errorf("servers: ClickHouse cluster %q: want a plain name and at least one shard", name)
		}
		for _, shard := range shards {
			if len(shard) == 0 {
				return fmt.Errorf("servers: ClickHouse cluster %s has a shard without replicas", name)
			}
			for _, addr := range shard {
				if _, _, err := net.SplitHostPort(addr); err != nil {
					return fmt.Errorf("servers: ClickHouse cluster %s: replica %q is not host:port", name, addr)
				}
			}
		}
	}
	for _, addr := range c.ZooKeeper {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("servers: ClickHouse ZooKeeper node %q is not host:port", addr)
		}
	}
	for k := range c.Macros {
		if !xmlNameRE.MatchString(k) {
			return fmt.Errorf("servers: ClickHouse macro %q is not a plain name", k)
		}
	}
	if c.TCPPort <= 0 || c.HTTPPort <= 0 {
		return fmt.Errorf("servers: ClickHouse ports %d and %d: want both set", c.TCPPort, c.HTTPPort)
	}
	return nil
}

// Prepare creates the data directory and writes ConfigFile.
func (c ClickHouse) Prepare() error {
	if err := c.check(); err != nil {
		return err
	}
	for _, d := range []string{c.DataDir, filepath.Dir(c.ConfigFile), filepath.Dir(c.EngineLog), filepath.Dir(c.EngineErrorLog)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create ClickHouse directory: %w", err)
		}
	}
	tmp := c.ConfigFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(c.config()), 0o644); err != nil {
		return fmt.Errorf("write the ClickHouse config: %w", err)
	}
	if err := os.Rename(tmp, c.ConfigFile); err != nil {
		return fmt.Errorf("write the ClickHouse config: %w", err)
	}
	return nil
}

// config is the engine's config document.
func (c ClickHouse) config() string {
	rot := proc.DefaultRotation()
	var b strings.Builder
	b.WriteString("<!-- Written by servescope's dev/servers; edits are overwritten. -->\n<clickhouse>\n")
	b.WriteString("    <logger>\n")
	fmt.Fprintf(&b, "        <log>%s</log>\n", xmlText(c.EngineLog))
	fmt.Fprintf(&b, "        <errorlog>%s</errorlog>\n", xmlText(c.EngineErrorLog))
	b.WriteString("        <errorlog_level>error</errorlog_level>\n")
	fmt.Fprintf(&b, "        <size>%dM</size>\n", rot.MaxBytes>>20)
	fmt.Fprintf(&b, "        <count>%d</count>\n", rot.Backups)
	b.WriteString("    </logger>\n")
	if c.UsersFile != "" {
		fmt.Fprintf(&b, "    <user_directories>\n        <users_xml><path>%s</path></users_xml>\n    </user_directories>\n", xmlText(c.UsersFile))
	}
	if len(c.Clusters) > 0 {
		b.WriteString("    <remote_servers>\n")
		for _, name := range slices.Sorted(maps.Keys(c.Clusters)) {
			fmt.Fprintf(&b, "        <%s>\n", name)
			if c.ClusterSecret != "" {
				fmt.Fprintf(&b, "            <secret>%s</secret>\n", xmlText(c.ClusterSecret))
			}
			for _, shard := range c.Clusters[name] {
				b.WriteString("            <shard>\n                <internal_replication>true</internal_replication>\n")
				for _, addr := range shard {
					host, port, _ := net.SplitHostPort(addr)
					fmt.Fprintf(&b, "                <replica><host>%s</host><port>%s</port></replica>\n", xmlText(host), xmlText(port))
				}
				b.WriteString("            </shard>\n")
			}
			fmt.Fprintf(&b, "        </%s>\n", name)
		}
		b.WriteString("    </remote_servers>\n")
	}
	if len(c.Macros) > 0 {
		b.WriteString("    <macros>\n")
		for _, k := range slices.Sorted(maps.Keys(c.Macros)) {
			fmt.Fprintf(&b, "        <%s>%s</%s>\n", k, xmlText(c.Macros[k]), k)
		}
		b.WriteString("    </macros>\n")
	}
	if len(c.ZooKeeper) > 0 {
		b.WriteString("    <zookeeper>\n")
		for _, addr := range c.ZooKeeper {
			host, port, _ := net.SplitHostPort(addr)
			fmt.Fprintf(&b, "        <node><host>%s</host><port>%s</port></node>\n", xmlText(host), xmlText(port))
		}
		b.WriteString("    </zookeeper>\n")
	}
	b.WriteString("</clickhouse>\n")
	return b.String()
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Spec is the process that runs the server, ready once Healthy succeeds. Errors show the tail of
// the engine's error log after the launcher's.
func (c ClickHouse) Spec() proc.Spec {
	return proc.Spec{
		Name:          "clickhouse",
		Path:          c.Launcher,
		Args:          c.Args(),
		Log:           c.Log,
		ExtraLogs:     []string{c.EngineErrorLog},
		PidFile:       c.PidFile,
		Ready:         c.Healthy,
		ReadyTimeout:  c.ReadyTimeout,
		StopGrace:     c.StopGrace,
		OnCrash:       c.OnCrash,
		DieWithCaller: c.DieWithCaller,
	}
}

// ClickHouseServer is a ClickHouse server the caller supervises: Start, Stop, Kill and Restart
// keep its ports and data, so tables and acknowledged inserts survive them.
type ClickHouseServer struct {
	*proc.Process
	cfg ClickHouse
}

// NewClickHouse prepares c (see ClickHouse.Prepare) and returns its server, not started yet.
func NewClickHouse(c ClickHouse) (*ClickHouseServer, error) {
	p, err := newProcess(c)
	if err != nil {
		return nil, err
	}
	return &ClickHouseServer{Process: p, cfg: c}, nil
}

// Config is the server's description.
func (s *ClickHouseServer) Config() ClickHouse { return s.cfg }

// Addr is the native protocol address; it stays valid across restarts.
func (s *ClickHouseServer) Addr() string { return s.cfg.Addr() }

// HTTPURL is the HTTP interface's base URL; it stays valid across restarts.
func (s *ClickHouseServer) HTTPURL() string { return s.cfg.HTTPURL() }

// xmlNameRE is what a cluster or macro name, which becomes an XML element, may be.
var xmlNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// frameLine matches a stack frame of the engine's fatal-signal report ("<Fatal> BaseDaemon: 3. ...").
var frameLine = regexp.MustCompile(`<Fatal> [A-Za-z]+: [0-9]+\. `)

// LastCrash returns the engine's last fatal-signal report in its error log: the report's first
// lines without the stack (signal, thread, query), preceded by the uncaught exception when
// std::terminate caused the crash; "" when the log holds none. Lines are cut at 400 bytes.
func LastCrash(engineErrorLog string) (string, error) {
	f, err := os.Open(engineErrorLog)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the engine's error log: %w", err)
	}
	defer f.Close()
	var cause, causeNext string
	var report []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !strings.Contains(line, "<Fatal>"):
		case strings.Contains(line, "Terminate called for uncaught exception"):
			// The exception's message is the next line, whatever its level.
			cause = line
			if sc.Scan() {
				causeNext = sc.Text()
			}
		case strings.Contains(line, "#####"):
			// A report begins.
			report = report[:0]
		case frameLine.MatchString(line):
		case len(report) < 4:
			report = append(report, line)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read the engine's error log: %w", err)
	}
	var out []string
	// The exception belongs to this crash when it was logged in the same second.
	if cause != "" && len(report) > 0 && len(cause) >= 19 && len(report[0]) >= 19 && cause[:19] == report[0][:19] {
		out = append(out, cause, causeNext)
	}
	out = append(out, report...)
	for i, l := range out {
		if len(l) > 400 {
			out[i] = l[:400]
		}
	}
	return strings.Join(out, "\n"), nil
}

// ClusterProfile is the default settings profile of a sharded cluster's users, as the compose
// cluster profile gives its nodes (deploy/clickhouse/cluster/users.d/servescope-profile.xml):
//   - distributed_product_mode=global runs an IN or JOIN subquery over a Distributed table inside
//     a query over another (the ready "in flight" query: requests_started ... NOT IN (SELECT
//     request_id FROM requests ...)) once on the node that was asked, and ships its answer to the
//     shards, as GLOBAL IN would: with ClickHouse's default (deny) such a query fails with code 288;
//   - push_external_roles_in_interserver_queries=0 has the shards run a query as the user who
//     asked with that user's own roles there (the services set it themselves: config.ClickHouse).
var ClusterProfile = map[string]string{"distributed_product_mode": "global", "push_external_roles_in_interserver_queries": "0"}

// ClusterUsersXML is a users.xml for the development shards: the passwordless default user (all
// privileges, as the engine's own default) with profile default = ClusterProfile.
func ClusterUsersXML() string {
	var b strings.Builder
	b.WriteString("<!-- Written by servescope's dev/servers; edits are overwritten. -->\n<clickhouse>\n")
	b.WriteString("    <profiles>\n        <default>\n")
	for _, k := range slices.Sorted(maps.Keys(ClusterProfile)) {
		fmt.Fprintf(&b, "            <%s>%s</%s>\n", k, xmlText(ClusterProfile[k]), k)
	}
	b.WriteString("        </default>\n    </profiles>\n")
	b.WriteString("    <quotas><default></default></quotas>\n")
	b.WriteString("    <users>\n        <default>\n            <password></password>\n")
	b.WriteString("            <networks><ip>::/0</ip></networks>\n            <profile>default</profile>\n            <quota>default</quota>\n")
	b.WriteString("            <access_management>1</access_management>\n        </default>\n    </users>\n</clickhouse>\n")
	return b.String()
}
