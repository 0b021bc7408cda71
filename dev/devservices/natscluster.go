package devservices

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/servescope/servescope/dev/proc"
	"github.com/servescope/servescope/dev/servers"
)

// NATSClusterName is the JetStream cluster name of the nodes `up nats-cluster` runs.
const NATSClusterName = "servescope-dev-cluster"

// NATSCluster describes the nodes of the dev JetStream cluster: node i (from 1) is the server
// servescope-dev-<i>, taking clients on NATSClusterPort+i-1, monitoring on
// NATSClusterMonitorPort+i-1 and routes on NATSClusterRoutePort+i-1, each routed to every other;
// its store is <cache>/nats-cluster/nats-<i>/data, its log nats-server.log and its pid file
// nats-server.pid beside it.
func (c Config) NATSCluster() ([]servers.NATS, error) {
	nodes := make([]servers.NATS, c.NATSClusterNodes)
	routes := make([]int, c.NATSClusterNodes)
	for i := range nodes {
		dir := filepath.Join(c.CacheDir, "nats-cluster", "nats-"+strconv.Itoa(i+1))
		nodes[i] = servers.NATS{
			Bin:          servers.InstalledIn(c.CacheDir).NATSServer,
			Port:         c.NATSClusterPort + i,
			MonitorPort:  c.NATSClusterMonitorPort + i,
			StoreDir:     filepath.Join(dir, "data"),
			ServerName:   "servescope-dev-" + strconv.Itoa(i+1),
			Log:          filepath.Join(dir, "nats-server.log"),
			PidFile:      filepath.Join(dir, "nats-server.pid"),
			ReadyTimeout: c.StartTimeout,
			StopGrace:    stopGrace,
		}
		routes[i] = c.NATSClusterRoutePort + i
	}
	return servers.NATSCluster(NATSClusterName, nodes, routes)
}

// clusterServers are the cluster's nodes as the commands handle them, named nats-1, nats-2, ...
// A node is started once JetStream is on (its Spec's Ready), and healthy once it knows the
// JetStream meta leader and its streams are current (/healthz without options).
func (c Config) clusterServers() ([]server, error) {
	nodes, err := c.NATSCluster()
	if err != nil {
		return nil, err
	}
	out := make([]server, len(nodes))
	for i, n := range nodes {
		out[i] = server{
			name: "nats-" + strconv.Itoa(i+1), spec: n.Spec(), prepare: n.Prepare, healthy: n.ClusterHealthy,
			health: fmt.Sprintf("127.0.0.1:%d already answers healthz", n.MonitorPort),
			where:  fmt.Sprintf("on 127.0.0.1:%d, monitoring :%d, routes :%d", n.Port, n.MonitorPort, n.ClusterPort),
			status: func(pid int, health string) string {
				return fmt.Sprintf("running pid %-8d %-9s %s  monitor %s  name %s", pid, health, n.URL(), n.MonitorURL(), n.ServerName)
			},
			foreign:   "healthy " + n.URL(),
			lastCrash: func() (string, error) { return "", nil },
		}
	}
	return out, nil
}

// UpNATSCluster starts every node of the dev cluster that is not running, as Up starts a server,
// then waits until each node is healthy as a member of the cluster (the JetStream meta leader
// elected and known to all), and says which URLs to give the services.
func UpNATSCluster(ctx context.Context, c Config) error {
	if err := servers.InstalledIn(c.CacheDir).Check(); err != nil {
		return err
	}
	nodes, err := c.clusterServers()
	if err != nil {
		return err
	}
	unlock, err := c.lock()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, s := range nodes {
		if err := c.up(ctx, s); err != nil {
			c.say("%s: %v", s.name, err)
			errs = append(errs, fmt.Errorf("%s did not come up", s.name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	for _, s := range nodes {
		if err := waitHealthy(wctx, s); err != nil {
			return fmt.Errorf("%s is not a healthy member of cluster %s after %s: %w", s.name, NATSClusterName, c.StartTimeout, err)
		}
	}
	cfgs, err := c.NATSCluster()
	if err != nil {
		return err
	}
	leader, err := cfgs[0].MetaLeader(ctx)
	if err != nil {
		return err
	}
	c.say("nats cluster %s: %d nodes healthy, JetStream meta leader %s; point the services at it with SERVESCOPE_NATS_URL=%s SERVESCOPE_STREAM_REPLICAS=3",
		NATSClusterName, len(nodes), leader, servers.ClientURLs(cfgs))
	return nil
}

// waitHealthy polls s's health until it answers or ctx ends, returning the last answer then.
func waitHealthy(ctx context.Context, s server) error {
	for {
		err := s.healthy(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// clusterStarted reports whether status and down should show the cluster's nodes: one of them
// has a pid file (running, or died since it was started) or answers on its port.
func clusterStarted(ctx context.Context, nodes []server) (bool, error) {
	for _, s := range nodes {
		found, err := proc.Inspect(s.spec.PidFile, &s.spec)
		if err != nil {
			return false, err
		}
		if found.Pid != 0 || healthyNow(ctx, s) {
			return true, nil
		}
	}
	return false, nil
}

// clusterStatus is the status line under the nodes': the URLs to give the services and the
// JetStream meta leader, as the first node that answers reports it.
func (c Config) clusterStatus(ctx context.Context) string {
	cfgs, err := c.NATSCluster()
	if err != nil {
		return err.Error()
	}
	leader := "none (no node answers)"
	for _, n := range cfgs {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := n.MetaLeader(qctx)
		cancel()
		if err == nil {
			leader = l
			if leader == "" {
				leader = "none elected"
			}
			break
		}
	}
	return fmt.Sprintf("cluster %s: JetStream meta leader %s; SERVESCOPE_NATS_URL=%s", NATSClusterName, leader, servers.ClientURLs(cfgs))
}
