package cluster_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// TestGossip_SeedRestartedAloneFindsTheOthers: every node's seed is node0,
// as in the README and the deployments, so node0's only seed is itself.
// Killed long enough for the others to declare it dead (they then stop
// gossiping to it), node0 started again must find them through the peers
// it remembered, not wait for them to find it.
func TestGossip_SeedRestartedAloneFindsTheOthers(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(func(_ int, cfg *cluster.Config) {
		tight := cfg.Gossip
		cfg.Gossip = func(mc *memberlist.Config) {
			tight(mc)
			mc.GossipToTheDeadTime = 0 // a member declared dead hears nothing more
		}
	}))
	c.WaitForLeader(10 * time.Second)
	seed := c.Nodes[0].Config.GossipAddr
	for _, nd := range c.Nodes {
		nd.Config.Join = []string{seed}
	}
	// The others' views reach node0 before it goes down.
	aliveSeen(t, c.Nodes[0].Node(), 3)

	c.Kill(0)
	clustertest.Eventually(t, 10*time.Second, func() error {
		for _, m := range c.Nodes[1].Node().Members() {
			if m.ID == c.Nodes[0].ID && m.Health != cluster.HealthDead {
				return fmt.Errorf("node1 sees node0 %s, not yet dead", m.Health)
			}
		}
		return nil
	})
	// The others no longer gossip to node0: only node0 can reach out.
	c.Restart(0)
	aliveSeen(t, c.Nodes[0].Node(), 3)
}

// aliveSeen waits until n sees want members alive in gossip (itself
// included), within a few of its join retries.
func aliveSeen(t *testing.T, n *cluster.Node, want int) {
	t.Helper()
	clustertest.Eventually(t, 3*time.Second, func() error {
		alive := 0
		for _, m := range n.Members() {
			if m.Health == cluster.HealthAlive {
				alive++
			}
		}
		if alive < want {
			return fmt.Errorf("%s sees %d members alive, want %d", n.NodeID(), alive, want)
		}
		return nil
	})
}
