package cluster_test

import (
	"fmt"
	"testing"

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

	c.Partition(victim.ID)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		rc := r.ReloadableConfig()
		if s := r.State(); s != raft.Candidate || rc.ElectionTimeout != cfg.LeaderLeaseTimeout || rc.HeartbeatTimeout != cfg.LeaderLeaseTimeout {
			return fmt.Errorf("cut off: %v with heartbeat and election timeouts %v and %v, want a candidate with both at the lease timeout %v",
				s, rc.HeartbeatTimeout, rc.ElectionTimeout, cfg.LeaderLeaseTimeout)
		}
		return nil
	})
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		rc := r.ReloadableConfig()
		if s := r.State(); s != raft.Candidate || rc.ElectionTimeout != cfg.ElectionTimeout || rc.HeartbeatTimeout != cfg.HeartbeatTimeout {
			return fmt.Errorf("cut off for long: %v with heartbeat and election timeouts %v and %v, want a candidate with the configured %v and %v",
				s, rc.HeartbeatTimeout, rc.ElectionTimeout, cfg.HeartbeatTimeout, cfg.ElectionTimeout)
		}
		return nil
	})
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		rc := r.ReloadableConfig()
		if s := r.State(); s != raft.Follower || rc.ElectionTimeout != cfg.ElectionTimeout || rc.HeartbeatTimeout != cfg.HeartbeatTimeout {
			return fmt.Errorf("healed: %v with heartbeat and election timeouts %v and %v, want a follower with %v and %v",
				s, rc.HeartbeatTimeout, rc.ElectionTimeout, cfg.HeartbeatTimeout, cfg.ElectionTimeout)
		}
		return nil
	})
}
