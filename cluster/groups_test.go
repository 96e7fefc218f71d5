package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/cluster/group"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// TestGroups_GrowShrink: on three nodes, the one group lists its three
// voters, online, and its leader; shrinking a follower takes it out of
// the voters (and reconcile leaves it out), growing it puts it back (the
// leader is not shrunk: the next leader would add it back), and
// growing a member changes nothing; with one node killed, shrinking
// another would leave one online voter of two and is refused.
func TestGroups_GrowShrink(t *testing.T) {
	c := clustertest.New(t, 3)
	leader := c.WaitForLeader(clustertest.Timeout)
	fs := c.Followers()
	f1, f2 := fs[0].NodeID(), fs[1].NodeID()
	all := []string{leader.NodeID(), f1, f2}
	slices.Sort(all)
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Timeout)
	defer cancel()

	clustertest.Eventually(t, clustertest.Timeout, func() error {
		gs := leader.Groups()
		if len(gs) != 1 {
			return fmt.Errorf("groups %+v", gs)
		}
		g := gs[0]
		if g.Name != "metadata" || g.Leader != leader.NodeID() || g.TargetSize != 3 || g.State != "Leader" || g.CommitIndex == 0 ||
			!slices.Equal(g.Voters(), all) || !slices.Equal(g.OnlineVoters(), all) || g.Segments < 1 {
			return fmt.Errorf("group %+v", g)
		}
		return nil
	})
	if led, err := leader.RebalanceGroups(ctx); err != nil || len(led) != 3 || led[leader.NodeID()] != 1 || led[f1] != 0 {
		t.Fatalf("rebalance: %v %v", led, err)
	}

	changes, err := leader.ShrinkGroups(ctx, leader.NodeID())
	if err != nil || len(changes) != 1 || !errors.Is(changes[0].Err, cluster.ErrShrinkLeader) || changes[0].Size != 3 {
		t.Fatalf("shrink of the leader: %+v %v", changes, err)
	}
	changes, err = leader.ShrinkGroups(ctx, f1)
	if err != nil || len(changes) != 1 || changes[0].Err != nil || changes[0].Size != 2 {
		t.Fatalf("shrink %s: %+v %v", f1, changes, err)
	}
	if v := voters(leader); slices.Contains(v, f1) || len(v) != 2 {
		t.Fatalf("voters after shrink %v", v)
	}
	// Reconcile, which adds alive members as voters, left it out: grow
	// finds it missing and adds it.
	changes, err = leader.GrowGroups(ctx, f1, false)
	if err != nil || len(changes) != 1 || changes[0].Err != nil || changes[0].Size != 3 {
		t.Fatalf("grow %s: %+v %v", f1, changes, err)
	}
	if v := voters(leader); !slices.Equal(v, all) {
		t.Fatalf("voters after grow %v", v)
	}
	if changes, err := leader.GrowGroups(ctx, f1, false); err != nil || len(changes) != 0 {
		t.Fatalf("grow of a member: %+v %v", changes, err)
	}
	if _, err := leader.GrowGroups(ctx, "nosuch", false); err == nil {
		t.Fatal("grow of an unknown node")
	}

	c.Kill(c.Index(f2))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if gs := leader.Groups(); slices.Contains(gs[0].OnlineVoters(), f2) {
			return fmt.Errorf("%s still online: %+v", f2, gs[0])
		}
		return nil
	})
	changes, err = leader.ShrinkGroups(ctx, f1)
	if err != nil || len(changes) != 1 || !errors.Is(changes[0].Err, cluster.ErrQuorumCritical) || changes[0].Size != 3 {
		t.Fatalf("shrink with a voter down: %+v %v", changes, err)
	}
	if v := voters(leader); !slices.Equal(v, all) {
		t.Fatalf("voters after a refused shrink %v", v)
	}
}

// TestGroups_ShrinkLastMember: a group's only voter is not removed, as
// RabbitMQ refuses to remove a quorum queue's last member.
func TestGroups_ShrinkLastMember(t *testing.T) {
	c := clustertest.New(t, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	changes, err := n.ShrinkGroups(context.Background(), n.NodeID())
	if err != nil || len(changes) != 1 || !errors.Is(changes[0].Err, cluster.ErrLastMember) || changes[0].Size != 1 {
		t.Fatalf("shrink: %+v %v", changes, err)
	}
	if changes[0].Err.Error() != "the last node cannot be removed" {
		t.Fatalf("message %q", changes[0].Err)
	}
}

// BenchmarkNode_Groups is what each scrape, queue listing and health
// check pays to read the groups: raft's stats and configuration, the
// members, and the log's segment files.
func BenchmarkNode_Groups(b *testing.B) {
	c := clustertest.New(b, 1)
	n := c.WaitForLeader(clustertest.Timeout)
	for b.Loop() {
		if len(n.Groups()) != 1 {
			b.Fatal("no group")
		}
	}
}

var queueGroupIDs = []string{"q1", "q2", "q3"}

func withQueueGroups(k int) clustertest.Option {
	return clustertest.WithConfig(func(i int, c *cluster.Config) { c.QueueGroups = k })
}

// waitQueueGroups waits until every live node runs the metadata group
// and the queue groups ids, each with a leader that every member agrees
// on, each queue group shown as the surfaces show a group (its name its
// id, its three members, its log's segments).
func waitQueueGroups(t *testing.T, c *clustertest.Cluster, ids []string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		leaders := map[string]string{}
		for _, n := range c.Live() {
			var got []string
			for _, g := range n.Groups() {
				got = append(got, g.ID)
				if g.ID != "" && (g.Name != g.ID || g.TargetSize != 3 || len(g.Voters()) != 3 || g.Segments < 1 || g.CommitIndex == 0) {
					return fmt.Errorf("%s: group %+v", n.NodeID(), g)
				}
				if g.Leader == "" {
					return fmt.Errorf("%s: group %s has no leader", n.NodeID(), g.ID)
				}
				if l, ok := leaders[g.ID]; ok && l != g.Leader {
					return fmt.Errorf("group %s: leaders %s and %s", g.ID, l, g.Leader)
				}
				leaders[g.ID] = g.Leader
			}
			if !slices.Equal(got, append([]string{""}, ids...)) {
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
					leader = g.Leader
				}
			}
			res, err := n.SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()})
			// A leader killed with the Tick in flight leaves its outcome
			// unknown, as it would a client's publish; a Tick may be sent
			// again, so the test does what such a client does.
			for tries := 0; errors.Is(err, group.ErrOutcomeUnknown) && tries < 10; tries++ {
				res, err = n.SubmitGroup(ctxT(t, clustertest.Timeout), id, []*proto.Command{tick()})
			}
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
					if g.ID == id && g.LastApplied < last {
						return fmt.Errorf("%s applied group %s to %d, want %d", n.NodeID(), id, g.LastApplied, last)
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
		if len(specs) != 0 || len(n.Groups()) != 1 {
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
