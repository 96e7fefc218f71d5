package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
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
