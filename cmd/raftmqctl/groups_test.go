package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestListGroups_QueueGroups: a lone node asked for two queue groups
// runs both (itself their one member) and leads them; list_groups shows
// them after the metadata group, each with its own raft state and a
// target of the members the log names.
func TestListGroups_QueueGroups(t *testing.T) {
	c := clustertest.New(t, 1, clustertest.WithConfig(func(_ int, cfg *cluster.Config) { cfg.QueueGroups = 2 }))
	n := c.WaitForLeader(clustertest.Timeout)
	addr := serveAdmin(t, ops.New(ops.Deps{Node: ops.FromCluster(n)}))
	id := n.NodeID()
	var want []string
	for _, g := range []string{"metadata", "q1", "q2"} {
		want = append(want, fmt.Sprintf("%s %s [%q] Leader 1", g, id, id))
	}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		code, out, errs := ctl(t, addr, "--quiet", "list_groups", "name", "leader", "members", "state", "target_size")
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
		if code != exitOK || strings.Join(got, "\n") != strings.Join(want, "\n") {
			return fmt.Errorf("exit %d, %q %s; want %q", code, out, errs, want)
		}
		return nil
	})
}
