package cluster_test

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// leaderCounts waits until whichever node leads has counted want more
// than when it was first seen leading: on a loaded machine an election
// can move the lead, and a follower counts nothing.
func leaderCounts(t *testing.T, c *clustertest.Cluster, what string, count func(*cluster.Node) uint64, want uint64) {
	t.Helper()
	var l *cluster.Node
	var from uint64
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if now := c.Leader(); now != l {
			if l = now; l != nil {
				from = count(l)
			}
		}
		if l == nil {
			return fmt.Errorf("no leader")
		}
		if got := count(l) - from; got < want {
			return fmt.Errorf("%s answered %d %s, want %d", l.NodeID(), got, what, want)
		}
		return nil
	})
}

// An idle group's leader stops sending its followers the appends that
// repeat what they already hold (group.QuietAppends), and the entries
// that come after the quiet spell still reach every follower, and the
// spell begins again after them.
func TestCluster_AnIdleLeaderStopsRepeatingItselfAndWakesForTheNextEntry(t *testing.T) {
	c := clustertest.New(t, 3)
	submitOK(t, c, tick())
	repeats := func(n *cluster.Node) uint64 { _, answered := n.QuietAppends(); return answered }
	leaderCounts(t, c, "repeats", repeats, 20)
	for range 3 {
		c.WaitApplied(tickOn(t, c))
	}
	c.AssertSameDigest(t)
	leaderCounts(t, c, "repeats", repeats, 20)
}

// An idle metadata group's leader answers heartbeats to a fresh follower
// without sending them, as a queue group's does: what its reach hears of
// then is bounded by membership.UnreachedAfter (its own test).
func TestCluster_AnIdleMetadataLeaderAnswersHeartbeats(t *testing.T) {
	c := clustertest.New(t, 3)
	submitOK(t, c, tick())
	leaderCounts(t, c, "heartbeats", (*cluster.Node).HeartbeatsAnswered, 20)
}
