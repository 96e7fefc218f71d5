package cluster_test

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// An idle group's leader stops sending its followers the appends that
// repeat what they already hold (group.QuietAppends), and the entries
// that come after the quiet spell still reach every follower, and the
// spell begins again after them.
func TestCluster_AnIdleLeaderStopsRepeatingItselfAndWakesForTheNextEntry(t *testing.T) {
	c := clustertest.New(t, 3)
	submitOK(t, c, tick())
	quiet := func(want uint64) {
		t.Helper()
		// Counted on whichever node leads: on a loaded machine an
		// election can move the lead, and a follower answers none.
		var l *cluster.Node
		var from uint64
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			if now := c.Leader(); now != l {
				if l = now; l == nil {
					return fmt.Errorf("no leader")
				}
				_, from = l.QuietAppends()
			}
			if _, answered := l.QuietAppends(); answered < from+want {
				return fmt.Errorf("%s answered %d repeats, want %d", l.NodeID(), answered-from, want)
			}
			return nil
		})
	}
	quiet(20)
	for range 3 {
		c.WaitApplied(tickOn(t, c))
	}
	c.AssertSameDigest(t)
	quiet(20)
}
