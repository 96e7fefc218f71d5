package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A node killed before raft's snapshot timer ever fired (a crash loop)
// snapshots once it has replayed the long log it restarted with, so its
// next restart does not replay it again; one whose log is short does not.
func TestCluster_RestartSnapshotsAfterReplayingALongLog(t *testing.T) {
	const threshold = 200
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotThreshold = threshold
		c.TrailingLogs = threshold / 2
		// Raft's own check never comes in the test: the process does
		// not live that long.
		c.SnapshotInterval = time.Hour
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	short := c.Followers()[0]
	si := c.Index(short.NodeID())
	c.Kill(si)
	c.Restart(si) // a few entries after the start: below the threshold
	short = c.Nodes[si].Node()

	for range threshold + 50 {
		mustSubmit(t, l, tick())
	}
	last := mustSubmit(t, l, tick())[0].GetIndex()
	c.WaitApplied(last)
	for _, n := range c.Live() {
		if s := n.Stats(); s.LastSnapshotIndex != 0 {
			t.Fatalf("%s snapshotted at %d before any restart: raft's timer fired", n.NodeID(), s.LastSnapshotIndex)
		}
	}

	var vi int
	for i, nd := range c.Nodes {
		if n := nd.Node(); n != nil && n != l && n != short {
			vi = i
		}
	}
	c.Kill(vi)
	c.Restart(vi)
	back := c.Nodes[vi].Node()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if s := back.Stats(); s.LastSnapshotIndex < last {
			return fmt.Errorf("restarted with %d entries, snapshot at %d", last, s.LastSnapshotIndex)
		}
		return nil
	})
	if s := short.Stats(); s.LastSnapshotIndex != 0 {
		t.Fatalf("the node restarted with a short log snapshotted at %d", s.LastSnapshotIndex)
	}
}
