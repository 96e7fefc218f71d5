package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

var queueGroupIDs = []string{"q1", "q2", "q3"}

func withQueueGroups(k int) clustertest.Option {
	return clustertest.WithConfig(func(i int, c *cluster.Config) { c.QueueGroups = k })
}

// waitQueueGroups waits until every live node runs ids, each with a
// leader that every member agrees on.
func waitQueueGroups(t *testing.T, c *clustertest.Cluster, ids []string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		leaders := map[string]string{}
		for _, n := range c.Live() {
			var got []string
			for _, g := range n.Groups() {
				got = append(got, g.ID)
				if g.LeaderID == "" {
					return fmt.Errorf("%s: group %s has no leader", n.NodeID(), g.ID)
				}
				if l, ok := leaders[g.ID]; ok && l != g.LeaderID {
					return fmt.Errorf("group %s: leaders %s and %s", g.ID, l, g.LeaderID)
				}
				leaders[g.ID] = g.LeaderID
			}
			if !slices.Equal(got, ids) {
				return fmt.Errorf("%s runs groups %v, want %v", n.NodeID(), got, ids)
			}
		}
		return nil
	})
}

// submitEverywhere commits a Tick in each group through each live node
// (the group's leader itself, or forwarded to it with the group's id),
// and waits until every member has applied the last of them.
func submitEverywhere(t *testing.T, c *clustertest.Cluster, ids []string) (forwarded int) {
	t.Helper()
	for _, id := range ids {
		var last uint64
		for _, n := range c.Live() {
			var leader string
			for _, g := range n.Groups() {
				if g.ID == id {
					leader = g.LeaderID
				}
			}
			res, err := n.SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()})
			if err != nil || len(res) != 1 || res[0].GetCode() != 0 || res[0].GetIndex() == 0 {
				t.Fatalf("group %s through %s: %v, %v", id, n.NodeID(), res, err)
			}
			if leader != n.NodeID() {
				forwarded++
			}
			last = max(last, res[0].GetIndex())
		}
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			for _, n := range c.Live() {
				for _, g := range n.Groups() {
					if g.ID == id && g.Stats.FSMIndex < last {
						return fmt.Errorf("%s applied group %s to %d, want %d", n.NodeID(), id, g.Stats.FSMIndex, last)
					}
				}
			}
			return nil
		})
	}
	return forwarded
}

// Three nodes asked for three queue groups: the metadata leader names
// them in the log, each node opens each group (3 members: all of them)
// in its own directory on the node's one raft port, each group elects a
// leader and commits what any node submits (forwarded with the group's
// id), and a restarted node runs its groups again from its data dir.
func TestQueueGroups_ElectCommitForwardRestart(t *testing.T) {
	c := clustertest.New(t, 3, withQueueGroups(3))
	c.WaitForLeader(clustertest.Timeout)
	waitQueueGroups(t, c, queueGroupIDs)
	for _, n := range c.Live() {
		var specs []fsm.QueueGroup
		n.View(func(m *fsm.Machine) { specs = m.QueueGroups() })
		if len(specs) != 3 || len(specs[0].Members) != 3 || specs[0].Members[0].ID == specs[1].Members[0].ID {
			t.Fatalf("%s: the log's groups %+v: want 3 of 3 members, spread", n.NodeID(), specs)
		}
	}
	if f := submitEverywhere(t, c, queueGroupIDs); f == 0 {
		t.Fatal("nothing was forwarded")
	}
	for _, nd := range c.Nodes {
		for _, id := range queueGroupIDs {
			if _, err := os.Stat(filepath.Join(nd.Config.DataDir, "groups", id)); err != nil {
				t.Fatal(err)
			}
		}
	}

	c.Kill(1)
	// The others go on: each group keeps a quorum.
	submitEverywhere(t, c, queueGroupIDs)
	c.Restart(1)
	waitQueueGroups(t, c, queueGroupIDs)
	submitEverywhere(t, c, queueGroupIDs)
	// The metadata group too.
	mustSubmit(t, c.Nodes[1].Node(), tick())
	c.AssertSameDigest(t)
}

// While a server announces the level before queue groups (a node of the
// release before, which runs the metadata group alone), the log names no
// queue group and the metadata group works as before; once it comes back
// upgraded, the groups are created and it runs its own.
func TestQueueGroups_WaitForEveryServer(t *testing.T) {
	const old = 2
	c := clustertest.New(t, 3, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		cfg.QueueGroups = 2
		if i == old {
			cfg.Protocol = fsm.QueueGroupLevel - 1
		}
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitLevel(t, c, fsm.QueueGroupLevel-1)
	l.ProposeQueueGroups(ctxT(t, 10*time.Second))
	res := mustSubmit(t, c.Nodes[old].Node(), tick())
	c.WaitApplied(res[0].GetIndex())
	for _, n := range c.Live() {
		var specs []fsm.QueueGroup
		n.View(func(m *fsm.Machine) { specs = m.QueueGroups() })
		if len(specs) != 0 || len(n.Groups()) != 0 {
			t.Fatalf("%s: queue groups %+v while %s announces level %d", n.NodeID(), specs, c.Nodes[old].ID, fsm.QueueGroupLevel-1)
		}
	}

	c.Kill(old)
	c.Nodes[old].Config.Protocol = fsm.Protocol
	c.Restart(old)
	waitQueueGroups(t, c, queueGroupIDs[:2])
	submitEverywhere(t, c, queueGroupIDs[:2])
	c.AssertSameDigest(t)
}
