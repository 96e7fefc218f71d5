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

// A leader killed and started again before it is declared down releases
// its previous run itself (its own NodeDown, before it takes clients).
// The new leader's appends may reach it only later: raft backs off from
// the failures of its previous run. Here its raft stays cut off for a
// while after the restart, so it answers nothing until well past
// NodeDownAfter from the kill. The new leader counts its silence from
// the restart gossip announced, and does not declare it down: that
// NodeDown, committed after the node came back, would end the new run's
// connections. Its sink hears no NodeDown of it: its own release is not
// for its new run's clients.
func TestCluster_ARestartedLeaderIsNotDeclaredDownForItsPreviousRun(t *testing.T) {
	sinks := make([]*recorder, 3)
	for i := range sinks {
		sinks[i] = &recorder{}
	}
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) { cfg.Effects = sinks[i] }))
	old := c.WaitForLeader(clustertest.Timeout)
	id, oi := old.NodeID(), c.Index(old.NodeID())
	downAfter := c.Nodes[oi].Config.NodeDownAfter
	killed := time.Now()
	c.Kill(oi)
	c.WaitForLeader(clustertest.Timeout)
	c.FreezeRaft(id)
	c.Restart(oi)
	// Cut off until NodeDownAfter from the kill has passed, and not for
	// NodeDownAfter from the restart, which waited for the election (more
	// than an eighth of NodeDownAfter).
	time.Sleep(time.Until(killed.Add(downAfter * 9 / 8)))
	c.Heal()
	select {
	case <-c.Nodes[oi].Node().Ready():
	case <-time.After(clustertest.Timeout):
		t.Fatalf("%s did not come back", id)
	}
	time.Sleep(2 * downAfter)
	// A node's sink hears the NodeDowns of itself (the others' are not its
	// clients') that reach its clients: any the leader made.
	n := 0
	for _, d := range sinks[oi].downs() {
		if d == id {
			n++
		}
	}
	if n != 0 {
		t.Errorf("%s applied %d NodeDowns of itself for its clients, want none", id, n)
	}
}
