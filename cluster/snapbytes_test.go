package cluster_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
)

// A log that grew past SnapshotBytes in a few large entries, far below
// the entry-count threshold, is snapshotted on every node, and a restart
// of every node then starts from that snapshot: it reads and applies only
// the entries after it, not the whole log.
func TestCluster_SnapshotByLogSizeBoundsRestart(t *testing.T) {
	const (
		budget  = 1 << 20
		body    = 64 << 10
		perEnt  = 2 // publishes an entry: 128 KiB
		entries = 40
	)
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotThreshold = 1 << 20 // never by entry count
		c.SnapshotInterval = time.Hour
		c.SnapshotBytes = budget
	}))
	submitRetried(t, c, queueDeclare("/", "q"))
	var lastPublish uint64
	for i := range entries {
		var cmds []*proto.Command
		for j := range perEnt {
			cmds = append(cmds, publish("/", "q", fmt.Sprintf("%d.%d.", i, j)+strings.Repeat("b", body)))
		}
		lastPublish = submitRetried(t, c, cmds...)
	}
	c.WaitApplied(lastPublish)
	// A snapshot follows every budget of log (8 entries) a node appended,
	// give or take what it had not applied yet (a busy node lags): far
	// more than half the log is behind one.
	for _, nd := range c.Nodes {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if s := nd.Node().Stats(); s.LastSnapshotIndex*2 < lastPublish {
				return fmt.Errorf("%s: last snapshot at %d, last publish at %d", nd.ID, s.LastSnapshotIndex, lastPublish)
			}
			return nil
		})
	}
	snaps := make([]uint64, len(c.Nodes))
	for i, nd := range c.Nodes {
		snaps[i] = nd.Node().Stats().LastSnapshotIndex
	}
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i := range c.Nodes {
		c.Restart(i)
	}
	for i, nd := range c.Nodes {
		// The restarted node restored its snapshot and has the log after
		// it to read: no more than the tail.
		s := nd.Node().Stats()
		if s.LastSnapshotIndex < snaps[i] || s.LastSnapshotIndex == 0 {
			t.Fatalf("%s restarted from snapshot %d, had taken %d", nd.ID, s.LastSnapshotIndex, snaps[i])
		}
		if tail := s.LastLogIndex - s.LastSnapshotIndex; tail*2 > s.LastLogIndex {
			t.Fatalf("%s restarted with %d of %d entries after its snapshot to replay", nd.ID, tail, s.LastLogIndex)
		}
	}
	c.WaitApplied(submitRetried(t, c, tick()))
	c.AssertSameDigest(t)
}

// submitRetried submits cmds on the leader until they commit and returns
// their index: an outcome lost to a leadership change (megabytes moving
// between the nodes of one process can delay heartbeats on a busy
// machine) is submitted again, as a publisher does after a nack.
func submitRetried(t *testing.T, c *clustertest.Cluster, cmds ...*proto.Command) uint64 {
	t.Helper()
	var index uint64
	clustertest.Eventually(t, 3*clustertest.Timeout, func() error {
		res, err := c.WaitForLeader(clustertest.Timeout).SubmitBatch(ctxT(t, clustertest.Timeout), cmds)
		if err != nil {
			return err
		}
		index = res[0].GetIndex()
		return nil
	})
	return index
}

// Replicas append the same bytes: by size alone they would snapshot at
// once, and behind a long queue the whole majority would be busy writing
// its snapshot together. Each replica's first snapshot by size waits a
// share of the budget by its rank among the voters, so their snapshots
// come apart: the lowest id's first, the highest id's about two thirds of
// a budget later.
func TestCluster_ReplicasSnapshotBySizeApart(t *testing.T) {
	const (
		budget = 1 << 20
		body   = 128 << 10
	)
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotThreshold = 1 << 20 // never by entry count
		c.SnapshotInterval = time.Hour
		c.SnapshotBytes = budget
	}))
	submitRetried(t, c, queueDeclare("/", "q"))
	ids := make([]string, len(c.Nodes))
	for i, nd := range c.Nodes {
		ids[i] = nd.ID
	}
	slices.Sort(ids)
	// first[id] is the entry after which the node was first seen with a
	// snapshot, one entry at a time, each applied everywhere before the
	// next.
	first := map[string]int{}
	for i := 1; i <= 24 && len(first) < len(ids); i++ {
		c.WaitApplied(submitRetried(t, c, publish("/", "q", fmt.Sprintf("%d.", i)+strings.Repeat("b", body))))
		for _, nd := range c.Nodes {
			if _, seen := first[nd.ID]; !seen && nd.Node().Stats().LastSnapshotIndex > 0 {
				first[nd.ID] = i
			}
		}
	}
	lo, mid, hi := first[ids[0]], first[ids[1]], first[ids[2]]
	t.Logf("first snapshot after entry %d (%s), %d (%s), %d (%s)", lo, ids[0], mid, ids[1], hi, ids[2])
	if lo == 0 || mid == 0 || hi == 0 {
		t.Fatalf("a replica took no snapshot in 24 entries of %d KiB: %v", body>>10, first)
	}
	if !(lo <= mid && mid <= hi && lo < hi) {
		t.Fatalf("the replicas' first snapshots are not apart by rank: %v", first)
	}
}
