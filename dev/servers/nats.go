package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/servescope/servescope/dev/proc"
)

// NATS describes a nats-server with JetStream on 127.0.0.1. Bin, Port, MonitorPort, StoreDir and
// Log are required.
type NATS struct {
	// Bin is the nats-server executable (Installed.NATSServer).
	Bin string
	// Port takes clients; MonitorPort serves the monitoring endpoints, /healthz among them.
	Port, MonitorPort int
	// StoreDir is the JetStream store: streams and acknowledged messages survive a restart.
	StoreDir string
	// ServerName is the server's name (nats-server makes one up when empty).
	ServerName string
	// MaxPayloadBytes raises the largest message the server accepts (its default, 1 MiB, when 0).
	MaxPayloadBytes int
	// MaxFileStoreBytes is JetStream's file storage budget, which every stream's max_bytes is
	// reserved against when the stream is made (1 TiB when 0). A development or test server's
	// streams hold little: nats-server's own default, 75% of the disk free when it starts, refused
	// the suite's parallel tests their streams (err 10047, "insufficient storage resources") on a
	// machine with 14 GB free.
	MaxFileStoreBytes int64
	// ConfigFile is where the settings nats-server takes no flag for (the two above) are written
	// (StoreDir/servescope-nats.conf when empty).
	ConfigFile string

	// ClusterPort, when set, makes the server a node of the cluster ClusterName: it takes routes
	// from the other nodes on 127.0.0.1:<ClusterPort> and solicits Routes (their cluster URLs,
	// nats://127.0.0.1:<port>). JetStream then runs clustered (Raft over the routes), which needs
	// a ServerName that stays the same across restarts: a node is known to its peers by it.
	// [NATSCluster] fills these for every node.
	ClusterPort int
	ClusterName string
	Routes      []string

	// Log receives the server's output; PidFile, when set, records its pid (see proc.Spec).
	Log, PidFile string
	// ReadyTimeout and StopGrace as in proc.Spec (its defaults when 0).
	ReadyTimeout, StopGrace time.Duration
	// OnCrash is called when the server exits on its own (see proc.Spec.OnCrash).
	OnCrash func(error)
	// DieWithCaller ends the server with the caller's process (see proc.Spec.DieWithCaller).
	DieWithCaller bool
}

// URL is the client URL, nats://127.0.0.1:<Port>.
func (n NATS) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(n.Port) }

// MonitorURL is the monitoring base URL, http://127.0.0.1:<MonitorPort>.
func (n NATS) MonitorURL() string { return "http://127.0.0.1:" + strconv.Itoa(n.MonitorPort) }

// Healthy succeeds when the server answers 200 on /healthz?js-enabled-only=true: it takes
// clients and JetStream is on.
func (n NATS) Healthy(ctx context.Context) error {
	_, err := httpGet(ctx, n.MonitorURL()+"/healthz?js-enabled-only=true")
	return err
}

// Args are nats-server's arguments.
func (n NATS) Args() []string {
	args := []string{"-c", n.configFile()}
	args = append(args,
		"--addr", "127.0.0.1",
		"--port", strconv.Itoa(n.Port),
		"--http_port", strconv.Itoa(n.MonitorPort),
		"--jetstream", "--store_dir", n.StoreDir)
	if n.ServerName != "" {
		args = append(args, "--server_name", n.ServerName)
	}
	if n.ClusterPort > 0 {
		args = append(args, "--cluster", n.ClusterURL(), "--cluster_name", n.ClusterName)
		if len(n.Routes) > 0 {
			args = append(args, "--routes", strings.Join(n.Routes, ","))
		}
	}
	return args
}

// ClusterURL is the URL other nodes route to, nats://127.0.0.1:<ClusterPort> ("" without one).
func (n NATS) ClusterURL() string {
	if n.ClusterPort <= 0 {
		return ""
	}
	return "nats://127.0.0.1:" + strconv.Itoa(n.ClusterPort)
}

// ClusterHealthy succeeds when the server answers 200 on /healthz: beyond Healthy, a clustered
// node then knows the JetStream meta leader and its streams and consumers are current.
func (n NATS) ClusterHealthy(ctx context.Context) error {
	_, err := httpGet(ctx, n.MonitorURL()+"/healthz")
	return err
}

// MetaLeader returns the name of the server leading the JetStream meta group of n's cluster, as
// n's /jsz reports it ("" while none is elected).
func (n NATS) MetaLeader(ctx context.Context) (string, error) {
	body, err := httpGet(ctx, n.MonitorURL()+"/jsz")
	if err != nil {
		return "", err
	}
	var jsz struct {
		Meta *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := json.Unmarshal([]byte(body), &jsz); err != nil {
		return "", fmt.Errorf("read %s/jsz: %w", n.MonitorURL(), err)
	}
	if jsz.Meta == nil {
		return "", nil
	}
	return jsz.Meta.Leader, nil
}

func (n NATS) check() error {
	switch {
	case n.Bin == "" || n.StoreDir == "" || n.Log == "":
		return errors.New("servers: NATS needs Bin, StoreDir and Log")
	case n.Port <= 0 || n.MonitorPort <= 0:
		return fmt.Errorf("servers: NATS ports %d and %d: want both set", n.Port, n.MonitorPort)
	case n.ClusterPort > 0 && (n.ServerName == "" || n.ClusterName == ""):
		return errors.New("servers: a NATS cluster node needs ServerName and ClusterName")
	}
	return nil
}

// Prepare creates the store directory and writes the config file.
func (n NATS) Prepare() error {
	if err := n.check(); err != nil {
		return err
	}
	if err := os.MkdirAll(n.StoreDir, 0o755); err != nil {
		return fmt.Errorf("create the NATS store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(n.configFile()), 0o755); err != nil {
		return fmt.Errorf("create the NATS config directory: %w", err)
	}
	conf := "# Written by servescope's dev/servers; edits are overwritten.\n"
	if n.MaxPayloadBytes > 0 {
		conf += fmt.Sprintf("max_payload: %d\n", n.MaxPayloadBytes)
	}
	store := n.MaxFileStoreBytes
	if store <= 0 {
		store = 1 << 40
	}
	conf += fmt.Sprintf("jetstream {\n  max_file_store: %d\n}\n", store)
	if err := os.WriteFile(n.configFile(), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write the NATS config: %w", err)
	}
	return nil
}

func (n NATS) configFile() string {
	if n.ConfigFile != "" {
		return n.ConfigFile
	}
	return filepath.Join(n.StoreDir, "servescope-nats.conf")
}

// Spec is the process that runs the server, ready once Healthy succeeds.
func (n NATS) Spec() proc.Spec {
	return proc.Spec{
		Name:          "nats-server",
		Path:          n.Bin,
		Args:          n.Args(),
		Log:           n.Log,
		PidFile:       n.PidFile,
		Ready:         n.Healthy,
		ReadyTimeout:  n.ReadyTimeout,
		StopGrace:     n.StopGrace,
		OnCrash:       n.OnCrash,
		DieWithCaller: n.DieWithCaller,
	}
}

// NATSServer is a nats-server the caller supervises: Start, Stop, Kill and Restart keep its
// ports and store, so streams and acknowledged messages survive them.
type NATSServer struct {
	*proc.Process
	cfg NATS
}

// NewNATS prepares n (see NATS.Prepare) and returns its server, not started yet.
func NewNATS(n NATS) (*NATSServer, error) {
	p, err := newProcess(n)
	if err != nil {
		return nil, err
	}
	return &NATSServer{Process: p, cfg: n}, nil
}

// Config is the server's description.
func (s *NATSServer) Config() NATS { return s.cfg }

// URL is the client URL; it stays valid across restarts.
func (s *NATSServer) URL() string { return s.cfg.URL() }

// NATSCluster makes nodes, each a complete single-server description with its own ServerName,
// ports and StoreDir, into the nodes of one JetStream cluster called name: every node gets a
// ClusterPort from clusterPorts (one per node, same order), the ClusterName, and Routes to every
// other node. A cluster of 3 keeps streams at 3 replicas writable while any one node is down.
func NATSCluster(name string, nodes []NATS, clusterPorts []int) ([]NATS, error) {
	if len(clusterPorts) != len(nodes) {
		return nil, fmt.Errorf("servers: %d NATS nodes but %d cluster ports", len(nodes), len(clusterPorts))
	}
	out := make([]NATS, len(nodes))
	for i, n := range nodes {
		n.ClusterName, n.ClusterPort, n.Routes = name, clusterPorts[i], nil
		out[i] = n
	}
	for i := range out {
		for j, peer := range out {
			if j != i {
				out[i].Routes = append(out[i].Routes, peer.ClusterURL())
			}
		}
		if err := out[i].check(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ClientURLs is the comma-separated client URLs of nodes, as SERVESCOPE_NATS_URL takes them.
func ClientURLs(nodes []NATS) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}
