package main

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/api/ops"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestListGroups_AgainstSingleNodeCluster: a lone node asked for two
// queue groups runs both (itself their one member) and leads them;
// list_groups shows them from ClusterStatus.
func TestListGroups_AgainstSingleNodeCluster(t *testing.T) {
	c := clustertest.New(t, 1, clustertest.WithConfig(func(_ int, cfg *cluster.Config) { cfg.QueueGroups = 2 }))
	n := c.WaitForLeader(clustertest.Timeout)
	addr := serveAdmin(t, ops.New(ops.Deps{Node: ops.FromCluster(n)}))
	id := n.NodeID()
	want := fmt.Sprintf("id  members  leader  raft_state\nq1  %s    %s   Leader\nq2  %s    %s   Leader\n", id, id, id, id)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		code, out, errs := ctl(t, addr, "--quiet", "list_groups", "id", "members", "leader", "raft_state")
		if code != exitOK || out != want {
			return fmt.Errorf("exit %d, %q %s; want %q", code, out, errs, want)
		}
		return nil
	})
}
