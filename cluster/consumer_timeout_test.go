package cluster_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/raftmq/raftmq/cluster"
	"github.com/raftmq/raftmq/cluster/clustertest"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

func consumeOn(ch *proto.ChannelRef, queue, tag string, prefetch uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{
		Vhost: "/", Queue: queue, Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}, Prefetch: prefetch,
	}}}
}

func (r *recorder) timedOutChannels() []*proto.ChannelRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.timedOut)
}

func (r *recorder) timedOutConsumers() []*proto.ConsumerRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.consumersTimedOut)
}

func (r *recorder) deliveriesTo(tag string) []*fsm.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*fsm.Delivery
	for _, d := range r.delivered {
		if d.Consumer.GetTag() == tag {
			out = append(out, d)
		}
	}
	return out
}

// The leader proposes ConsumerTimeout when a delivery to a consumer on a
// follower has gone unacknowledged for the leader's --consumer-timeout, on
// the log's clock and not a millisecond before; only the follower is told
// that its consumer timed out (from level 10 the channel stays, and its
// other consumer keeps receiving), and the message goes to another
// consumer, redelivered.
func TestCluster_ConsumerTimeoutCancelsTheFollowersConsumer(t *testing.T) {
	const timeout = 500 * time.Millisecond
	sinks := []*recorder{{}, {}, {}}
	c := clustertest.New(t, 3, clustertest.WithFakeClock(t0), clustertest.WithConfig(func(i int, cfg *cluster.Config) {
		cfg.Effects = sinks[i]
		cfg.ConsumerTimeout = timeout
	}))
	l := c.WaitForLeader(clustertest.Timeout)
	waitDefaults(t, c, l)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		var level uint32
		l.View(func(m *fsm.Machine) { level = m.ProtocolLevel() })
		if level < 10 {
			return errors.New("the log's level is not 10 yet")
		}
		return nil
	})
	f := c.Followers()[0]
	fi := c.Index(f.NodeID())
	stuck := &proto.ChannelRef{Node: f.NodeID(), Connection: "conn-1", Channel: 1}
	requireFSM(t, mustSubmit(t, l, declareWithArgs("ct")))
	requireFSM(t, mustSubmit(t, l, declareWithArgs("ct2")))
	requireFSM(t, mustSubmit(t, f, consumeOn(stuck, "ct", "stuck", 1)))
	requireFSM(t, mustSubmit(t, f, consumeOn(stuck, "ct2", "busy", 0)))
	published := mustSubmit(t, l, publishTo("ct", "m1"))
	requireFSM(t, published)
	assignedAt := entryStamp(t, l, published[0].GetIndex())
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if len(sinks[fi].deliveriesTo("stuck")) != 1 {
			return errors.New("the follower's consumer has not got the message")
		}
		return nil
	})

	isTimeout := func(cmd *proto.Command) bool { return cmd.GetConsumerTimeout() != nil }
	c.AdvanceClock(timeout - time.Millisecond)
	c.WaitApplied(mustSubmit(t, l, tick())[0].GetIndex())
	if got := findCommands(t, l, isTimeout); len(got) != 0 {
		t.Fatalf("a consumer timeout was proposed before the deadline: %v", got)
	}
	c.AdvanceClock(time.Millisecond)
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if len(sinks[fi].timedOutConsumers()) == 0 {
			return errors.New("the follower was not told its consumer timed out")
		}
		return nil
	})
	got := findCommands(t, l, isTimeout)
	if len(got) != 1 || got[0].stamp != assignedAt+timeout.Milliseconds() || got[0].cmd.GetConsumerTimeout().GetDefaultMs() != timeout.Milliseconds() {
		t.Fatalf("timeout commands %v, want one stamped %d with the default %d", got, assignedAt+timeout.Milliseconds(), timeout.Milliseconds())
	}
	if cs := sinks[fi].timedOutConsumers(); len(cs) != 1 || cs[0].GetTag() != "stuck" ||
		cs[0].GetChannel().GetConnection() != "conn-1" || cs[0].GetChannel().GetChannel() != 1 {
		t.Fatalf("timed out consumers %v, want stuck alone", cs)
	}
	for i, s := range sinks {
		if len(s.timedOutChannels()) != 0 || (i != fi && len(s.timedOutConsumers()) != 0) {
			t.Fatalf("node%d was told to close a channel, or of a consumer of %s", i, f.NodeID())
		}
	}
	// The channel's other consumer keeps receiving.
	requireFSM(t, mustSubmit(t, l, publishTo("ct2", "m2")))
	clustertest.Eventually(t, clustertest.Timeout, func() error {
		if ds := sinks[fi].deliveriesTo("busy"); len(ds) != 1 || string(ds[0].Body) != "m2" {
			return errors.New("the channel's other consumer did not get m2")
		}
		return nil
	})

	other := &proto.ChannelRef{Node: l.NodeID(), Connection: "conn-2", Channel: 1}
	li := c.Index(l.NodeID())
	requireFSM(t, mustSubmit(t, l, consumeOn(other, "ct", "other", 1)))
	ds := sinks[li].deliveriesTo("other")
	if len(ds) != 1 || string(ds[0].Body) != "m1" || !ds[0].Redelivered {
		t.Fatalf("the other consumer got %v, want m1 redelivered", ds)
	}
	c.AssertSameDigest(t)
}
