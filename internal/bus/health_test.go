package bus

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// clusterFaults reads the cluster information nats-server returns (server/jetstream_cluster.go,
// clusterInfo): a single server's carries its name as leader and no Raft group; a leaderless
// group's remaining member lists itself among the replicas.
func TestClusterFaults(t *testing.T) {
	cases := []struct {
		name string
		ci   *jetstream.ClusterInfo
		want []string // one substring per fault, in order
	}{
		{"no cluster information", nil, nil},
		{"single server", &jetstream.ClusterInfo{Name: "", Leader: "n1"}, nil},
		{"one replica in a cluster", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R1F-x", Leader: "n2"}, nil},
		{"three current replicas", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n1", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Current: true}, {Name: "n3", Current: true, Lag: 2},
		}}, nil},
		{"one replica offline", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n1", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Current: true}, {Name: "n3", Offline: true, Active: 12 * time.Second},
		}}, []string{"S: replica on n3 offline (last seen 12s ago); the leader n1 serves with the others, and one more node lost stops it; start NATS node n3 again"}},
		{"one replica behind", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n1", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Current: false, Lag: 1500}, {Name: "n3", Current: true},
		}}, []string{"S: replica on n2 not current (1500 operations behind the leader n1)"}},
		{"one replica a few operations behind under load, seen just now", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n1", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Current: false, Lag: 1, Active: 3 * time.Millisecond}, {Name: "n3", Current: false, Lag: 40, Active: 20 * time.Millisecond},
		}}, nil},
		{"a killed node's replica under load: unseen and behind", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n1", Replicas: []*jetstream.PeerInfo{
			{Name: "n2", Current: true}, {Name: "n3", Current: false, Lag: 212, Active: 9 * time.Second},
		}}, []string{"S: replica on n3 unreachable (last seen by the leader n1 9s ago, 212 operations behind); the leader serves with the others"}},
		{"no leader, two offline", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Replicas: []*jetstream.PeerInfo{
			{Name: "n3", Current: true}, {Name: "n2", Offline: true}, {Name: "n1", Offline: true},
		}}, []string{"S: no leader, so it stores and delivers no message; replicas not current (offline or unreachable) on n1, n2; start the stopped NATS nodes"}},
		{"one replica unseen", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n3", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Current: false, Active: 7 * time.Second}, {Name: "n2", Current: true},
		}}, []string{"S: replica on n1 unreachable (last seen by the leader n3 7s ago); the leader serves with the others, and one more node lost stops it; start NATS node n1 again"}},
		{"a replica just added, seen a second ago", &jetstream.ClusterInfo{Name: "c", RaftGroup: "S-R3F-x", Leader: "n3", Replicas: []*jetstream.PeerInfo{
			{Name: "n1", Current: false, Active: time.Second}, {Name: "n2", Current: true},
		}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := clusterFaults("S", tc.ci, "stores and delivers no message")
			if len(got) != len(tc.want) {
				t.Fatalf("faults %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("fault %d: %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
