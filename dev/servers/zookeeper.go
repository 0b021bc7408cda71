package servers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// ZooKeeper is Debian's zookeeper package (3.8 on Debian 12), the coordination service a
// Replicated…MergeTree table and ON CLUSTER DDL need (ClickHouse Keeper speaks the same protocol;
// the development engine has no Keeper of its own). [InstallZooKeeper] installs it with apt-get
// when missing, as scripts/dev-services installs Debian's chromium.
const (
	// ZooKeeperPackage is the Debian package; it pulls in a Java runtime (default-jre).
	ZooKeeperPackage = "zookeeper"
	// ZooKeeperJar is the server's jar in Debian's libzookeeper-java; its manifest names the
	// jars it needs, so it is the whole class path.
	ZooKeeperJar = "/usr/share/java/zookeeper.jar"
	// zooKeeperMain is the server's entry point (Debian's /etc/zookeeper/conf_example/environment:
	// ZOOMAIN); with no server.N lines in its config it runs standalone.
	zooKeeperMain = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
)

// installMu keeps two callers of one process from running apt-get at once (dpkg's own lock
// refuses a second caller instead of waiting).
var installMu sync.Mutex

// InstallZooKeeper installs Debian's zookeeper package with apt-get (update, then install without
// recommended packages) when ZooKeeperJar is missing, writing apt-get's output to log. It needs
// root and apt-get; without them, or when apt-get fails (no network, no mirror), the error says
// what to install by hand.
func InstallZooKeeper(ctx context.Context, log io.Writer) error {
	installMu.Lock()
	defer installMu.Unlock()
	if _, err := os.Stat(ZooKeeperJar); err == nil {
		return nil
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return fmt.Errorf("ZooKeeper is missing (%s) and this is not root on Debian: install Debian's %s package (apt-get install %s)",
			ZooKeeperJar, ZooKeeperPackage, ZooKeeperPackage)
	}
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", ZooKeeperPackage},
	} {
		cmd := exec.CommandContext(ctx, apt, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("install Debian's %s: apt-get %s: %w (is the Debian mirror reachable?)",
				ZooKeeperPackage, strings.Join(args, " "), err)
		}
	}
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return fmt.Errorf("apt-get installed %s but %s is missing: %w", ZooKeeperPackage, ZooKeeperJar, err)
	}
	return nil
}

// ZooKeeperConfig describes a standalone ZooKeeper on 127.0.0.1, run by Java from
// [ZooKeeperJar]. Port, DataDir, ConfigFile and Log are required.
type ZooKeeperConfig struct {
	// Java is the java executable ("java" on PATH when empty).
	Java string
	// Port takes clients (clientPort); the admin HTTP server is off.
	Port int
	// DataDir holds the snapshots and the transaction log: znodes survive a restart.
	DataDir string
	// ConfigFile is zoo.cfg, written by Prepare.
	ConfigFile string

	// Log receives the server's output (its log goes to the console); PidFile, when set, records
	// its pid (see proc.Spec).
	Log, PidFile string
	// ReadyTimeout and StopGrace as in proc.Spec (its defaults when 0).
	ReadyTimeout, StopGrace time.Duration
	// DieWithCaller ends the server with the caller's process (see proc.Spec.DieWithCaller).
	DieWithCaller bool
}

// Addr is the client address, 127.0.0.1:<Port>.
func (z ZooKeeperConfig) Addr() string { return "127.0.0.1:" + strconv.Itoa(z.Port) }

// Healthy succeeds when the four-letter command ruok answers imok: the server is running without
// error (a standalone server serves at once).
func (z ZooKeeperConfig) Healthy(ctx context.Context) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", z.Addr())
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("ruok")); err != nil {
		return fmt.Errorf("send ruok: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, 64))
	if err != nil {
		return fmt.Errorf("read ruok's answer: %w", err)
	}
	if string(b) != "imok" {
		return fmt.Errorf("ruok answered %q", b)
	}
	return nil
}

func (z ZooKeeperConfig) check() error {
	switch {
	case z.DataDir == "" || z.ConfigFile == "" || z.Log == "":
		return errors.New("servers: ZooKeeper needs DataDir, ConfigFile and Log")
	case z.Port <= 0:
		return fmt.Errorf("servers: ZooKeeper port %d: want it set", z.Port)
	}
	return nil
}

// config is zoo.cfg: standalone, loopback only, no admin HTTP server (it would take port 8080),
// and the four-letter commands the readiness check and an operator's `srvr` use.
func (z ZooKeeperConfig) config() string {
	return fmt.Sprintf(`# Written by servescope's dev/servers; edits are overwritten.
tickTime=2000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
`, z.DataDir, z.Port)
}

// Prepare creates the data directory and writes ConfigFile.
func (z ZooKeeperConfig) Prepare() error {
	if err := z.check(); err != nil {
		return err
	}
	for _, d := range []string{z.DataDir, filepath.Dir(z.ConfigFile)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create ZooKeeper directory: %w", err)
		}
	}
	if err := os.WriteFile(z.ConfigFile, []byte(z.config()), 0o644); err != nil {
		return fmt.Errorf("write zoo.cfg: %w", err)
	}
	return nil
}

// Spec is the process that runs the server, ready once Healthy succeeds.
func (z ZooKeeperConfig) Spec() proc.Spec {
	java := z.Java
	if java == "" {
		java = "java"
	}
	return proc.Spec{
		Name: "zookeeper",
		Path: java,
		// A small heap: the server holds a handful of znodes here.
		Args:          []string{"-Xmx256m", "-cp", ZooKeeperJar, zooKeeperMain, z.ConfigFile},
		Log:           z.Log,
		PidFile:       z.PidFile,
		Ready:         z.Healthy,
		ReadyTimeout:  z.ReadyTimeout,
		StopGrace:     z.StopGrace,
		DieWithCaller: z.DieWithCaller,
	}
}

// ZooKeeper is a ZooKeeper server the caller supervises: Start, Stop and Kill keep its port and
// data.
type ZooKeeper struct {
	*proc.Process
	cfg ZooKeeperConfig
}

// NewZooKeeper prepares z (see ZooKeeperConfig.Prepare) and returns its server, not started yet.
func NewZooKeeper(z ZooKeeperConfig) (*ZooKeeper, error) {
	p, err := newProcess(z)
	if err != nil {
		return nil, err
	}
	return &ZooKeeper{Process: p, cfg: z}, nil
}

// Addr is the client address, 127.0.0.1:<port>.
func (s *ZooKeeper) Addr() string { return s.cfg.Addr() }
