package cluster_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// farGroup is group id as node n shows it without running it.
func farGroup(n *cluster.Node, id string) (cluster.GroupStatus, bool) {
	for _, g := range n.FarGroups() {
		if g.ID == id {
			return g, true
		}
	}
	return cluster.GroupStatus{}, false
}

// A node that does not run a queue group shows its members (the log's)
// and its leader (as the leader gossips it), and shows the new leader
// once the old one is killed.
func TestQueueGroups_ANonMemberShowsTheGroupsLeaderAndMembers(t *testing.T) {
	c := clustertest.New(t, 5, clustertest.WithConfig(following(3)))
	id := namedGroups(t, c, 3)[0].ID
	members, outsider := nonMember(t, c, id)
	slices.Sort(members)
	for _, fg := range outsider.FarGroups() {
		if slices.Contains(outsider.RunningQueueGroups(), fg.ID) {
			t.Fatalf("%s lists group %s, which it runs, as far", outsider.NodeID(), fg.ID)
		}
	}
	shows := func(want string) error {
		fg, ok := farGroup(outsider, id)
		switch {
		case !ok:
			return fmt.Errorf("%s does not list group %s", outsider.NodeID(), id)
		case !fg.Far:
			return fmt.Errorf("group %s is not marked far", id)
		case !slices.Equal(fg.Voters(), members):
			return fmt.Errorf("group %s shows members %v, want %v", id, fg.Voters(), members)
		case fg.Leader != want:
			return fmt.Errorf("group %s shows leader %q, want %q", id, fg.Leader, want)
		}
		return nil
	}
	old := groupLeader(t, c, id)
	clustertest.Eventually(t, clustertest.Timeout, func() error { return shows(old.NodeID()) })

	c.Kill(c.Index(old.NodeID()))
	var next *cluster.Node
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if fg, ok := farGroup(outsider, id); ok && fg.Leader == old.NodeID() {
			// Gossip has yet to find the killed node dead: it may
			// still be shown, and then only until it is.
			return fmt.Errorf("still shows the killed %s", old.NodeID())
		}
		next = groupLeader(t, c, id)
		return shows(next.NodeID())
	})
	if next.NodeID() == old.NodeID() {
		t.Fatalf("the killed node %s leads group %s", old.NodeID(), id)
	}
}
