package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// slowGossip never probes: gossip alone would show a killed member alive
// for the whole test, so what the test sees comes from raft.
func slowGossip(_ int, cfg *cluster.Config) {
	tight := cfg.Gossip
	cfg.Gossip = func(mc *memberlist.Config) {
		tight(mc)
		mc.ProbeInterval = time.Hour
	}
}

// healthOn waits until every node of ns shows member id with this health.
func healthOn(t *testing.T, ns []*cluster.Node, id, want string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, n := range ns {
			if m, _ := seen(n, id); m.Health != want {
				return fmt.Errorf("%s shows %s %q, want %q", n.NodeID(), id, m.Health, want)
			}
		}
		return nil
	})
}

// A killed follower is suspect on every node as soon as the leader's
// heartbeats to it fail, whatever gossip says; alive again once it is
// back.
func TestMembers_KilledFollowerIsSuspectFromRaft(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(slowGossip))
	c.WaitForLeader(clustertest.Timeout)
	victim := c.Followers()[0]
	vi := c.Index(victim.NodeID())
	for _, nd := range c.Nodes {
		healthOn(t, c.Live(), nd.ID, cluster.HealthAlive)
	}
	c.Kill(vi)
	healthOn(t, c.Live(), victim.NodeID(), cluster.HealthSuspect)
	c.Restart(vi)
	healthOn(t, c.Live(), victim.NodeID(), cluster.HealthAlive)
}

// A killed leader is suspect on the others: the new leader's heartbeats to
// it fail.
func TestMembers_KilledLeaderIsSuspectFromRaft(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(slowGossip))
	l := c.WaitForLeader(clustertest.Timeout)
	for _, nd := range c.Nodes {
		healthOn(t, c.Live(), nd.ID, cluster.HealthAlive)
	}
	c.Kill(c.Index(l.NodeID()))
	healthOn(t, c.Live(), l.NodeID(), cluster.HealthSuspect)
}
