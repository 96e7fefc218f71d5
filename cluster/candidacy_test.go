package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A follower cut off from the others stands, and stands again: while it
// is a candidate its raft asks again after the lease timeout, not the
// election timeout (group/candidacy.go); once its short candidacies have
// won nothing for six leases it stands with the configured timeouts, as
// a starved node must to count votes that come back late; and once it
// follows a leader again its timeouts are the configured ones.
func TestCandidacy_ShortTimeoutsOnlyWhileACandidate(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	victim := c.Nodes[(c.Index(leader.NodeID())+1)%3]
	r := victim.Node().MetaRaft()
	cfg := victim.Config

	// expect waits until the raft is in state with these timeouts.
	expect := func(when string, state raft.RaftState, hb, election time.Duration) {
		t.Helper()
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			rc := r.ReloadableConfig()
			if s := r.State(); s != state || rc.HeartbeatTimeout != hb || rc.ElectionTimeout != election {
				return fmt.Errorf("%s: %v with heartbeat and election timeouts %v and %v, want %v with %v and %v",
					when, s, rc.HeartbeatTimeout, rc.ElectionTimeout, state, hb, election)
			}
			return nil
		})
	}
	c.Partition(victim.ID)
	expect("cut off", raft.Candidate, cfg.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	expect("cut off for long", raft.Candidate, cfg.HeartbeatTimeout, cfg.ElectionTimeout)
	c.Heal()
	expect("healed", raft.Follower, cfg.HeartbeatTimeout, cfg.ElectionTimeout)
}
