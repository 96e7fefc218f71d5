package cluster_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
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

// outsiderConsuming starts five nodes with three queue groups (tweak,
// when set, adjusts each node's configuration), declares queue "held" in
// group q1, and has a channel of x, a node outside q1, consume from it
// (prefetch 100). It returns q1's members, x, the sink of x's effects,
// and a submitter into q1.
func outsiderConsuming(t *testing.T, tweak func(*cluster.Config)) (c *clustertest.Cluster, members []string, x *cluster.Node, sink *recorder, submit func(...*proto.Command)) {
	t.Helper()
	sinks := make([]*recorder, 5)
	for i := range sinks {
		sinks[i] = &recorder{}
	}
	c = clustertest.New(t, 5, clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		following(3)(i, cfg)
		cfg.Effects = sinks[i]
		if tweak != nil {
			tweak(cfg)
		}
	}))
	members, x = nonMember(t, c, effectsGroup)
	sink = sinks[c.Index(x.NodeID())]
	submit = groupSubmitter(t, c, effectsGroup)
	submit(&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declareWithArgs("held"))
	ch := &proto.ChannelRef{Node: x.NodeID(), Connection: "conn-1", Channel: 1}
	submit(consumeOn(ch, "held", "ctag", 100))
	return c, members, x, sink, submit
}

// publishThrough publishes body to outsiderConsuming's queue through
// node n, until a try commits.
func publishThrough(t *testing.T, n *cluster.Node, body string) {
	t.Helper()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		res, err := n.SubmitGroup(ctxT(t, 3*time.Second), effectsGroup,
			[]*proto.Command{fsmtest.Enqueue("/", "", "held", body, &proto.Properties{}, "held")})
		if err != nil {
			return err
		}
		requireFSM(t, res)
		return nil
	})
}

// awaitDelivery waits up to within for sink, node x's, to hold a
// delivery of body.
func awaitDelivery(t *testing.T, x *cluster.Node, sink *recorder, body string, within time.Duration) {
	t.Helper()
	clustertest.Eventually(t, within, func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, d := range sink.delivered {
			if string(d.Body) == body {
				return nil
			}
		}
		return fmt.Errorf("%s got no delivery of %q", x.NodeID(), body)
	})
}

// effectsGroup is the queue group of outsiderConsuming's queue.
const effectsGroup = "q1"

// A node that does not run a queue group gets the effects of the group's
// log for its channels from a member, as a stream: each delivery once,
// with its body. When that member is killed, the node takes the stream
// from another and first catches up with what it missed meanwhile (the
// deliveries its channel holds unsettled in the log), without handing
// its channel any delivery twice.
func TestEffects_ANonMemberGetsItsChannelsEffectsFromAMember(t *testing.T) {
	c, members, x, sink, submit := outsiderConsuming(t, nil)

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

// A consumer of a node outside the group that times out while the node's
// stream is down (the node frozen, so nothing reaches it) is told as the
// timeout it was once the node is back, not as a consumer whose queue
// went: the member's sync brings the timeouts it applied. Only that
// consumer's channel loses it.
func TestEffects_ATimeoutWhileTheStreamIsDownIsToldAsATimeout(t *testing.T) {
	const timeout = 2 * time.Second
	c, members, x, sink, submit := outsiderConsuming(t, func(cfg *cluster.Config) {
		cfg.ConsumerTimeout = timeout
		cfg.NodeDownAfter = time.Hour // the frozen node is not declared down
	})
	// A consume through the node itself, as its AMQP server makes them:
	// the node knows its consumer from the commit.
	submit(declareWithArgs("late"))
	ch := &proto.ChannelRef{Node: x.NodeID(), Connection: "conn-2", Channel: 1}
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		res, err := x.SubmitGroup(ctxT(t, 3*time.Second), effectsGroup, []*proto.Command{consumeOn(ch, "late", "mine", 10)})
		if err != nil {
			return err
		}
		requireFSM(t, res)
		return nil
	})
	submit(fsmtest.Enqueue("/", "", "late", "m", &proto.Properties{}, "late"))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if len(sink.deliveriesTo("mine")) != 1 {
			return fmt.Errorf("%s has not got the message", x.NodeID())
		}
		return nil
	})
	c.FreezeButGossip(x.NodeID())
	t.Cleanup(c.Heal)
	member := c.Nodes[c.Index(members[1])].Node()
	clustertest.Eventually(t, clustertest.Timeout+timeout, func() error {
		var consumers int
		if !member.ViewGroup(effectsGroup, func(m *fsm.Machine) {
			for _, nc := range m.NodeChannels(x.NodeID()) {
				if nc.Ref.GetConnection() == ch.GetConnection() {
					consumers += len(nc.Consumers)
				}
			}
		}) {
			return fmt.Errorf("%s does not run %s", member.NodeID(), effectsGroup)
		}
		if consumers != 0 {
			return fmt.Errorf("%s's consumer has not timed out yet", x.NodeID())
		}
		return nil
	})
	if got := sink.timedOutConsumers(); len(got) != 0 {
		t.Fatalf("%s was told while frozen: %v", x.NodeID(), got)
	}
	c.Heal()
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if got := sink.timedOutConsumers(); len(got) != 1 || got[0].GetTag() != "mine" {
			return fmt.Errorf("%s told of timeouts %v, want mine's", x.NodeID(), got)
		}
		return nil
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.cancelled) != 0 || len(sink.timedOut) != 0 {
		t.Fatalf("%s was told of cancels %v and channels timed out %v as well", x.NodeID(), sink.cancelled, sink.timedOut)
	}
}

// A member that stops answering while gossip still finds it alive (its
// raft and gRPC frozen, nobody declared down or unreached) sends no more
// effects and closes nothing: the node finds the stream silent past the
// keepalives the member promised and takes it from another member.
func TestEffects_ASilentMembersStreamIsTakenFromAnother(t *testing.T) {
	c, members, x, sink, submit := outsiderConsuming(t, func(cfg *cluster.Config) {
		cfg.NodeDownAfter = time.Hour // nobody is found unreached or down
	})
	submit(fsmtest.Enqueue("/", "", "held", "before", &proto.Properties{}, "held"))
	awaitDelivery(t, x, sink, "before", clustertest.Timeout)

	// The stream comes from the first member on the first attempt.
	// It may be the group's leader: the publish goes through another
	// member, which follows the group's election.
	c.FreezeButGossip(members[0])
	t.Cleanup(c.Heal)
	frozen := time.Now()
	other := c.Nodes[c.Index(members[1])].Node()
	publishThrough(t, other, "after")
	published := time.Now()
	// Well within the 15 s gRPC's own keepalive takes to end a stream
	// whose peer does not answer.
	awaitDelivery(t, x, sink, "after", 5*time.Second)
	t.Logf("published %v after the freeze, received %v after that", published.Sub(frozen).Round(time.Millisecond), time.Since(published).Round(time.Millisecond))
}

// A member that takes a new stream's request and sends nothing back (it
// froze while gossip still finds it alive) has promised no keepalives
// yet: the node still leaves it within the keepalive it asked for, and
// takes its effects from another member. gRPC's own keepalive would
// end that stream only after 15 s.
func TestEffects_AStreamOpenedToASilentMemberGoesToAnother(t *testing.T) {
	c, members, x, sink, submit := outsiderConsuming(t, func(cfg *cluster.Config) {
		cfg.NodeDownAfter = time.Hour // nobody is found unreached or down
	})
	ix := c.Index(x.NodeID())
	c.Kill(ix)
	// From before x starts again, its links to every member's gRPC
	// port take nothing. Its first stream goes to the first member its
	// gossip shows alive, which, while it joins again, need not be the
	// first the log names; the links to the others then thaw.
	grpcAddr := map[string]string{}
	for _, m := range members {
		grpcAddr[m] = c.Nodes[c.Index(m)].Config.GRPCAddr
		c.Nodes[ix].Links.Freeze(grpcAddr[m])
	}
	t.Cleanup(c.Heal)
	c.Restart(ix)
	x = c.Nodes[ix].Node()
	var first string
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var opened int
		if opened, first = x.EffectsStream(effectsGroup); opened == 0 {
			return fmt.Errorf("%s opened no stream yet", x.NodeID())
		}
		return nil
	})
	for _, m := range members {
		if m != first {
			c.Nodes[ix].Links.Thaw(grpcAddr[m])
		}
	}
	submit(consumeOn(&proto.ChannelRef{Node: x.NodeID(), Connection: "conn-2", Channel: 1}, "held", "ctag", 100))
	publishThrough(t, c.Nodes[c.Index(members[1])].Node(), "after")
	published := time.Now()
	awaitDelivery(t, x, sink, "after", 5*time.Second)
	_, source := x.EffectsStream(effectsGroup)
	if source == first {
		t.Fatalf("the effects still come from %s, the silent member", first)
	}
	t.Logf("received %v after the publish, from %s (the first stream went to %s)", time.Since(published).Round(time.Millisecond), source, first)
}

// A member cut off from its group's raft, but reached by the node and
// found alive by gossip, learns no more of the log, so it has no effects
// to send: it stops its keepalives too once it is out of touch with the
// group, and the node takes the stream from a member that is not.
func TestEffects_AMemberOutOfTouchWithItsGroupSendsNoKeepalives(t *testing.T) {
	c, members, x, sink, _ := outsiderConsuming(t, func(cfg *cluster.Config) {
		cfg.NodeDownAfter = time.Hour // nobody is found unreached or down
		// A member no leader sends to closes the group after ten
		// election timeouts, which would end the stream too: not
		// within this test.
		cfg.ElectionTimeout = 2 * time.Second
	})
	// The stream comes from the first member on the first attempt.
	c.FreezeRaft(members[0])
	t.Cleanup(c.Heal)
	other := c.Nodes[c.Index(members[1])].Node()
	publishThrough(t, other, "after")
	awaitDelivery(t, x, sink, "after", 5*time.Second)
}

// A node that hears from no leader for a while finds itself silent and
// ends its streams of effects once the member sends after that: what it
// sent must be fenced. The member itself is live, so the next stream
// goes to it again. Another member may be what silenced the node (a
// frozen metadata leader silences every node), and a stream to it would
// wait until the cluster finds it out while its group goes on
// delivering.
func TestEffects_AStreamCutByThisNodesSilenceGoesOnFromItsMember(t *testing.T) {
	c, _, x, sink, submit := outsiderConsuming(t, nil)
	submit(fsmtest.Enqueue("/", "", "held", "before", &proto.Properties{}, "held"))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if len(sink.delivered) == 0 {
			return fmt.Errorf("%s got no delivery", x.NodeID())
		}
		return nil
	})
	opened, source := x.EffectsStream(effectsGroup)

	// x's raft hears no one: x is silent, while its stream's member
	// goes on sending keepalives.
	epoch := x.SilenceEpoch()
	c.FreezeRaft(x.NodeID())
	t.Cleanup(c.Heal)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if x.SilenceEpoch() == epoch {
			return fmt.Errorf("%s was not silent", x.NodeID())
		}
		if n, _ := x.EffectsStream(effectsGroup); n == opened {
			return fmt.Errorf("%s opened no stream after its silence", x.NodeID())
		}
		return nil
	})
	if _, next := x.EffectsStream(effectsGroup); next != source {
		t.Fatalf("%s took its stream from %s after its silence, not again from %s", x.NodeID(), next, source)
	}
}
