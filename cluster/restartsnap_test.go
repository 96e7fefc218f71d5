package cluster_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/proto"
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

// groupSnapshot is n's last snapshot index of the group id, and whether
// n runs it.
func groupSnapshot(n *cluster.Node, id string) (uint64, bool) {
	for _, g := range n.Groups() {
		if g.ID == id {
			return g.SnapshotIndex, true
		}
	}
	return 0, false
}

// A queue group's log is where the messages are: a member restarted on
// a long one snapshots it once replayed, as the metadata group does.
func TestCluster_RestartSnapshotsAQueueGroupsLongLog(t *testing.T) {
	const threshold = 200
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.QueueGroups = 1
		c.SnapshotThreshold = threshold
		c.TrailingLogs = threshold / 2
		c.SnapshotInterval = time.Hour
	}))
	const id = "q1"
	waitQueueGroups(t, c, []string{id})
	var last uint64
	for range threshold + 50 {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			res, err := c.WaitForLeader(clustertest.Timeout).SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()})
			if err != nil || len(res) != 1 || res[0].GetCode() != 0 {
				return fmt.Errorf("tick in %s: %v, %v", id, res, err)
			}
			last = res[0].GetIndex()
			return nil
		})
	}
	var vi int
	for i, nd := range c.Nodes {
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, g := range nd.Node().Groups() {
				if g.ID == id && g.LastApplied < last {
					return fmt.Errorf("%s applied %s to %d of %d", nd.ID, id, g.LastApplied, last)
				}
			}
			return nil
		})
		if snap, ok := groupSnapshot(nd.Node(), id); !ok || snap != 0 {
			t.Fatalf("%s: group %s snapshot at %d (runs it: %v) before any restart", nd.ID, id, snap, ok)
		}
		if g := nd.Node().Groups(); len(g) > 1 && g[1].State != "Leader" && nd.Node() != c.Leader() {
			vi = i
		}
	}
	c.Kill(vi)
	c.Restart(vi)
	back := c.Nodes[vi].Node()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if snap, ok := groupSnapshot(back, id); !ok || snap < last {
			return fmt.Errorf("%s restarted with %d entries of %s, snapshot at %d (runs it: %v)", back.NodeID(), last, id, snap, ok)
		}
		return nil
	})
}

// A node killed before it ever appends SnapshotBytes in one life (a
// crash loop on large messages, far below the entry threshold) still
// snapshots by size: what it replays at a restart counts, so the log a
// restart reads stops growing.
func TestCluster_ACrashLoopSnapshotsByTheBytesItReplays(t *testing.T) {
	const (
		budget = 1 << 20
		body   = 64 << 10
		perEnt = 2 // publishes an entry: 128 KiB
		life   = 4 // entries a life: half a budget
		lives  = 5 // two and a half budgets in all
	)
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, c *cluster.Config) {
		c.SnapshotThreshold = 1 << 20 // never by entry count
		c.TrailingLogs = 1 << 20      // the leader keeps every entry: no snapshot is sent
		c.SnapshotInterval = time.Hour
		c.SnapshotBytes = budget
	}))
	submitRetried(t, c, queueDeclare("/", "q"))
	vi := c.Index(c.Followers()[0].NodeID())
	var last uint64
	for l := range lives {
		for e := range life {
			var cmds []*proto.Command
			for j := range perEnt {
				cmds = append(cmds, publish("/", "q", fmt.Sprintf("%d.%d.%d.", l, e, j)+strings.Repeat("b", body)))
			}
			last = submitRetried(t, c, cmds...)
		}
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if a := c.Nodes[vi].Node().AppliedIndex(); a < last {
				return fmt.Errorf("%s applied %d of %d", c.Nodes[vi].ID, a, last)
			}
			return nil
		})
		if s := c.Nodes[vi].Node().Stats(); s.LastSnapshotIndex != 0 {
			if l == 0 {
				t.Fatalf("%s snapshotted at %d before any restart: a life appends a budget", c.Nodes[vi].ID, s.LastSnapshotIndex)
			}
			// Snapshotted in this life, by what it replayed.
			return
		}
		c.Kill(vi)
		c.Restart(vi)
	}
	back := c.Nodes[vi].Node()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if s := back.Stats(); s.LastSnapshotIndex == 0 {
			return fmt.Errorf("%s restarted %d times, %d entries of log, no snapshot", back.NodeID(), lives, s.LastLogIndex)
		}
		return nil
	})
}
