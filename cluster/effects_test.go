package cluster_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// nonMember waits until the metadata log of a cluster of more nodes than
// a group has names queue group id with its three members, each running
// it with the same leader, and returns the group's members in the log's
// order and a node that is not one of them.
func nonMember(t *testing.T, c *clustertest.Cluster, id string) (members []string, outsider *cluster.Node) {
	t.Helper()
	l := c.WaitForLeader(clustertest.Timeout)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		members = nil
		for _, g := range logGroups(l) {
			if g.ID == id {
				for _, m := range g.Members {
					members = append(members, m.ID)
				}
			}
		}
		if len(members) != 3 {
			return fmt.Errorf("group %s: members %v", id, members)
		}
		return nil
	})
	groupLeader(t, c, id)
	for _, n := range c.Live() {
		if !slices.Contains(members, n.NodeID()) {
			return members, n
		}
	}
	t.Fatalf("every node is a member of %s: %v", id, members)
	return nil, nil
}

// A node that does not run a queue group gets the effects of the group's
// log for its channels from a member, as a stream: each delivery once,
// with its body. When that member is killed, the node takes the stream
// from another and first catches up with what it missed meanwhile (the
// deliveries its channel holds unsettled in the log), without handing
// its channel any delivery twice.
func TestEffects_ANonMemberGetsItsChannelsEffectsFromAMember(t *testing.T) {
	sinks := make([]*recorder, 5)
	for i := range sinks {
		sinks[i] = &recorder{}
	}
	c := clustertest.New(t, 5, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		cfg.Effects = sinks[i]
	}))
	const id = "q1"
	members, x := nonMember(t, c, id)
	sink := sinks[c.Index(x.NodeID())]
	submit := groupSubmitter(t, c, id)
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declareWithArgs("held"))
	ch := &proto.ChannelRef{Node: x.NodeID(), Connection: "conn-1", Channel: 1}
	submit(consumeOn(ch, "held", "ctag", 100))

	publish := func(from, to int) {
		for i := from; i < to; i++ {
			submit(fsmtest.Enqueue("/", "", "held", fmt.Sprint(i), &proto.Properties{}, "held"))
		}
	}
	received := func(want int) {
		t.Helper()
		clustertest.Eventually(t, clustertest.Timeout, func() error {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			seen := map[uint64]string{}
			for _, d := range sink.delivered {
				if prev, dup := seen[d.DeliveryTag]; dup {
					t.Fatalf("tag %d handed twice (%q, then %q)", d.DeliveryTag, prev, d.Body)
				}
				seen[d.DeliveryTag] = string(d.Body)
			}
			if len(seen) != want {
				return fmt.Errorf("%s got %d deliveries, want %d", x.NodeID(), len(seen), want)
			}
			for tag := uint64(1); tag <= uint64(want); tag++ {
				if seen[tag] != fmt.Sprint(tag-1) {
					return fmt.Errorf("tag %d carries %q, want %q", tag, seen[tag], fmt.Sprint(tag-1))
				}
			}
			return nil
		})
	}
	publish(0, 10)
	received(10)

	// The stream comes from the first member on the first attempt.
	c.Kill(c.Index(members[0]))
	publish(10, 20)
	received(20)
}
