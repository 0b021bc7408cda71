package bus

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Fault is a resource that a JetStream cluster cannot serve as it should: no leader (nothing is
// stored or delivered), or a replica offline or behind its leader (one node's loss from a stop).
// The settings' check ([CheckConsumer]) cannot see it: a leaderless stream's remaining replica
// still answers with the stream's configuration.
type Fault struct {
	// Resource names it: "stream SERVESCOPE", "durable consumer servescope-writer on SERVESCOPE",
	// "key-value bucket SERVESCOPE_LEASES".
	Resource string
	// Problem says what is wrong; Fix what to do about it.
	Problem, Fix string
}

// String is one line for an operator: "stream SERVESCOPE: no leader (...); start ...".
func (f Fault) String() string { return f.Resource + ": " + f.Problem + "; " + f.Fix }

// errCodeClusterNotAvail is JetStream's "JetStream system temporarily unavailable"
// (JSClusterNotAvailErr in nats-server's server/errors.json), the answer of a replica whose
// group has no leader to a request only the leader can serve.
const errCodeClusterNotAvail jetstream.ErrorCode = 10008

// CheckCluster reads the cluster state of t's events and dead-letter streams, of each durable
// consumer in durables on the events stream, and of the lease bucket's stream, and returns one
// [Fault] per resource without a leader and per replica offline or not current. A resource on a
// single server, or at one replica, has no replicas to lose and never has a fault. A resource
// missing is passed over ([CheckConsumer] and [CheckLeases] say what is missing). Nothing is
// changed. Errors are NATS's (unreachable, JetStream off, no permission).
//
// Faults are confirmed: when the first reading finds any, the state is read again after
// confirmAfter and the second reading's faults are returned, so a moment's lag under load does
// not fail the check, while a node that is gone is still unreachable.
func CheckCluster(ctx context.Context, js jetstream.JetStream, t Topology, durables ...string) ([]Fault, error) {
	faults, err := checkCluster(ctx, js, t, durables)
	if err != nil || len(faults) == 0 {
		return faults, err
	}
	select {
	case <-ctx.Done():
		return faults, nil
	case <-time.After(confirmAfter):
	}
	return checkCluster(ctx, js, t, durables)
}

// checkCluster is one reading of [CheckCluster].
func checkCluster(ctx context.Context, js jetstream.JetStream, t Topology, durables []string) ([]Fault, error) {
	var faults []Fault
	for _, name := range []string{t.Stream(), t.DLQStream(), "KV_" + t.LeaseBucket()} {
		what := "stream " + name
		if name == "KV_"+t.LeaseBucket() {
			what = "key-value bucket " + t.LeaseBucket()
		}
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // CheckConsumer and CheckLeases say what is missing
		}
		if err != nil {
			if f, ok := unavailable(what, err); ok {
				faults = append(faults, f)
				continue
			}
			return faults, fmt.Errorf("read the cluster state of %s: %w", what, err)
		}
		info := st.CachedInfo()
		faults = append(faults, clusterFaults(what, info.Cluster, "stores and delivers no message")...)
	}
	for _, d := range durables {
		what := "durable consumer " + d + " on " + t.Stream()
		c, err := js.Consumer(ctx, t.Stream(), d)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			if f, ok := unavailable(what, err); ok {
				faults = append(faults, f)
				continue
			}
			return faults, fmt.Errorf("read the cluster state of %s: %w", what, err)
		}
		faults = append(faults, clusterFaults(what, c.CachedInfo().Cluster, "delivers nothing to the consumer and takes no acknowledgement")...)
	}
	return faults, nil
}

// unavailable turns JetStream's answer that a resource's group has no leader into a fault.
func unavailable(what string, err error) (Fault, bool) {
	var api *jetstream.APIError
	if !errors.As(err, &api) || (api.ErrorCode != errCodeClusterNotAvail && api.Code != http.StatusServiceUnavailable) {
		return Fault{}, false
	}
	return Fault{Resource: what,
		Problem: "JetStream cannot serve it (" + api.Description + "): its replicas have no leader",
		Fix:     "start the stopped NATS nodes so that a majority of its replicas runs (2 of 3), then check again"}, true
}

// replicaGrace is how long a replica that is not current may go unseen by its leader before it is
// "unreachable", whatever its lag: a few of nats-server's Raft heartbeats (1 s apart). A killed
// node is never reported offline by the leader, it stops being seen; under traffic its lag grows
// too, so the lag cannot tell it apart from a slow replica, the time unseen does.
const replicaGrace = 5 * time.Second

// healthyLag is how many operations a replica seen within replicaGrace may be behind its leader
// and still be healthy: under steady load a replica is behind by the entries in flight, a few
// hundred at most (at 25 requests/s `streams check` found 1 operation behind about once in
// twelve checks). More is a fault only if it is still there when CheckCluster confirms.
const healthyLag = 1000

// confirmAfter is how long CheckCluster waits before reading the cluster state again to confirm
// the faults of its first reading: a replica catching up a moment's backlog is current again.
const confirmAfter = 2 * time.Second

// clusterFaults reads one resource's cluster information: a group without a leader, and each
// replica offline or not current. stops says what a leaderless resource stops doing.
func clusterFaults(what string, ci *jetstream.ClusterInfo, stops string) []Fault {
	if ci == nil || ci.RaftGroup == "" {
		// A single server's or a one-replica resource: no replica to lose.
		return nil
	}
	if ci.Leader == "" {
		// A node killed is seen as not current before (if ever) as offline.
		var lost []string
		for _, p := range ci.Replicas {
			if p.Offline || !p.Current {
				lost = append(lost, p.Name)
			}
		}
		slices.Sort(lost)
		problem := "no leader, so it " + stops
		if len(lost) > 0 {
			problem += "; replicas not current (offline or unreachable) on " + strings.Join(lost, ", ")
		}
		return []Fault{{Resource: what, Problem: problem,
			Fix: "start the stopped NATS nodes so that a majority of its replicas runs (2 of 3); a leader is elected by itself then"}}
	}
	var out []Fault
	for _, p := range ci.Replicas {
		switch {
		case p.Offline:
			out = append(out, Fault{Resource: what,
				Problem: "replica on " + p.Name + " offline (last seen " + p.Active.Round(time.Millisecond).String() + " ago); the leader " + ci.Leader + " serves with the others, and one more node lost stops it",
				Fix:     "start NATS node " + p.Name + " again; its replica catches up by itself"})
		case !p.Current && p.Active >= replicaGrace:
			// A node killed (not stopped) is never reported offline by the leader: it stops
			// being seen, and under traffic falls behind as well.
			behind := ""
			if p.Lag > 0 {
				behind = ", " + strconv.FormatUint(p.Lag, 10) + " operations behind"
			}
			out = append(out, Fault{Resource: what,
				Problem: "replica on " + p.Name + " unreachable (last seen by the leader " + ci.Leader + " " +
					p.Active.Round(time.Millisecond).String() + " ago" + behind + "); the leader serves with the others, and one more node lost stops it",
				Fix: "start NATS node " + p.Name + " again, or read its log if it runs; its replica catches up by itself"})
		case !p.Current && p.Lag <= healthyLag:
			// Seen a moment ago and at most the entries in flight to catch up: a replica under
			// load, one just added by a scale-up, or between two heartbeats.
		case !p.Current:
			out = append(out, Fault{Resource: what,
				Problem: "replica on " + p.Name + " not current (" + strconv.FormatUint(p.Lag, 10) + " operations behind the leader " + ci.Leader + ")",
				Fix:     "it catches up by itself while node " + p.Name + " is healthy; if it stays behind, read that node's log and `nats server report jetstream`"})
		}
	}
	return out
}
