package cluster_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
)

// A node asked to stop hands the leadership of every group it leads (the
// metadata group and its queue groups) to another voter, so that none of
// them waits for its followers to find it silent and elect: once
// HandOver returns, each of those groups is led by another node.
func TestHandOver_AStoppingNodeLeadsNoGroup(t *testing.T) {
	c := clustertest.New(t, 3, clustertest.WithConfig(following(3)))
	l := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, 2*clustertest.Timeout, func() error {
		_, err := followed(c, queueGroupIDs, true)
		return err
	})
	var led []string
	for _, g := range l.Groups() {
		if g.State == "Leader" {
			led = append(led, g.ID)
		}
	}
	if len(led) < 2 {
		t.Fatalf("%s leads %v: the metadata group and one queue group at least were expected", l.NodeID(), led)
	}
	l.HandOver(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		for _, g := range l.Groups() {
			if g.State == "Leader" {
				return fmt.Errorf("%s still leads %s", l.NodeID(), g.ID)
			}
		}
		for _, id := range led {
			if !slices.ContainsFunc(c.Live(), func(n *cluster.Node) bool {
				return n != l && slices.ContainsFunc(n.Groups(), func(g cluster.GroupStatus) bool { return g.ID == id && g.State == "Leader" })
			}) {
				return fmt.Errorf("no other node leads %s", id)
			}
		}
		return nil
	})
	c.Kill(c.Index(l.NodeID()))
	commitThroughLeaders(t, c, queueGroupIDs)
}
