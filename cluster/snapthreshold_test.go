package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// publishMany queues n small messages on q, a few hundred to an entry.
func publishMany(t *testing.T, c *clustertest.Cluster, q string, n int) uint64 {
	t.Helper()
	var last uint64
	for i := 0; i < n; i += 500 {
		var cmds []*proto.Command
		for j := i; j < min(i+500, n); j++ {
			cmds = append(cmds, publish("/", q, fmt.Sprint(j)))
		}
		last = submitRetried(t, c, cmds...)
	}
	return last
}

// Left at its default, raft's entry threshold for a snapshot follows the
// messages the state holds, up and down again.
func TestCluster_SnapshotThresholdFollowsQueuedMessages(t *testing.T) {
	const queued = cluster.DefaultSnapshotThreshold + 1808
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotInterval = 100 * time.Millisecond
	}))
	submitOK(t, c, queueDeclare("/", "q"))
	c.WaitApplied(publishMany(t, c, "q", queued))
	threshold := func(want uint64) {
		t.Helper()
		for _, nd := range c.Nodes {
			clustertest.Eventually(t, clustertest.Timeout, func() error {
				if got := nd.Node().RaftSnapshotThreshold(); got != want {
					return fmt.Errorf("%s: snapshot threshold %d entries; want %d", nd.ID, got, want)
				}
				return nil
			})
		}
	}
	threshold(queued)

	c.WaitApplied(submitRetried(t, c, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "q"}}}))
	threshold(cluster.DefaultSnapshotThreshold)
}

// A threshold the configuration sets is raft's whatever the state holds.
func TestCluster_SnapshotThresholdSetIsKept(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithSnapshotThreshold(32))
	submitOK(t, c, queueDeclare("/", "q"))
	c.WaitApplied(publishMany(t, c, "q", 1000))
	for _, nd := range c.Nodes {
		nd.Node().ScaleSnapshotThreshold()
		if got := nd.Node().RaftSnapshotThreshold(); got != 32 {
			t.Fatalf("%s: snapshot threshold %d entries; want the configured 32", nd.ID, got)
		}
	}
}
