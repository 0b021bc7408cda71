package main

import (
	"bytes"
	"strings"
	"testing"
)

// On a cluster only `migrate up` spans the nodes; the commands that read or move one version
// table say how to address a node's local database instead of acting on the Distributed one.
func TestMigrateOnAClusterNamesTheNode(t *testing.T) {
	t.Setenv("SERVESCOPE_CLICKHOUSE_CLUSTER", "servescope")
	t.Setenv("SERVESCOPE_CLICKHOUSE_DATABASE", "obs")
	for _, args := range [][]string{{"migrate", "version"}, {"migrate", "down"}, {"migrate", "force", "3"}} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "SERVESCOPE_CLICKHOUSE_DATABASE=obs_local") {
			t.Errorf("%v on a cluster: %v, want the node's local database named", args, err)
		}
	}
}
