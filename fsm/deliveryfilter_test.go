package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// nodeSink takes the deliveries of one node's consumers, as a cluster
// node's sink does, and counts what it was handed.
type nodeSink struct {
	fsm.DiscardSink
	node      string
	delivered map[string]int
}

func (s *nodeSink) WantsDeliveries(c *proto.ConsumerRef) bool {
	return c.GetChannel().GetNode() == s.node
}

func (s *nodeSink) Deliver(d *fsm.Delivery) { s.delivered[d.Consumer.GetChannel().GetNode()]++ }

// A sink that wants only its node's deliveries is handed no other, and
// the state is the same as with a sink that takes them all.
func TestDeliveryFilter_OnlyWantedDeliveriesAreBuilt(t *testing.T) {
	props := &proto.Properties{MessageId: ptr("m"), Headers: &proto.Table{Fields: []*proto.Field{{Key: "k", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}}}}}
	ch2 := &proto.ChannelRef{Node: "n2", Connection: "c2", Channel: 1}
	run := func(sink fsm.Sink) *fsm.Machine {
		m := fsmtest.New(t)
		fsmtest.One(t, m, 2, declare("q", nil))
		fsmtest.One(t, m, 2, consume("q", "a", ch1, 0))
		fsmtest.One(t, m, 2, consume("q", "b", ch2, 0))
		for range 10 {
			m.Apply(entry(m, 3, publish("", "q", "body", props)), sink)
		}
		return m
	}
	filtered := &nodeSink{node: "n2", delivered: map[string]int{}}
	got := run(filtered)
	all := &recordingSink{}
	want := run(all)
	if filtered.delivered["n1"] != 0 || filtered.delivered["n2"] != 5 {
		t.Fatalf("deliveries handed to the sink by node: %v, want only n2's 5", filtered.delivered)
	}
	if len(all.deliveries) != 10 {
		t.Fatalf("a sink without a filter got %d deliveries, want 10", len(all.deliveries))
	}
	if got.Digest() != want.Digest() {
		t.Fatal("the filter changed the state")
	}
}

// recordingSink keeps every delivery.
type recordingSink struct {
	fsm.DiscardSink
	deliveries []*fsm.Delivery
}

func (s *recordingSink) Deliver(d *fsm.Delivery) { s.deliveries = append(s.deliveries, d) }

// BenchmarkApplyPublish_OtherNodesConsumer is a publish delivered at
// once to a consumer on another node, on a replica whose sink takes only
// its own node's deliveries, as followers apply most publishes.
func BenchmarkApplyPublish_OtherNodesConsumer(b *testing.B) {
	m := fsmtest.New(b)
	fsmtest.One(b, m, 2, declare("q", nil))
	fsmtest.One(b, m, 2, consume("q", "c", ch1, 0))
	props := &proto.Properties{DeliveryMode: ptr[uint32](2), Headers: &proto.Table{Fields: []*proto.Field{{Key: "k", Value: &proto.Value{Kind: &proto.Value_Int32{Int32: 1}}}}}}
	pub := publish("", "q", string(make([]byte, 1024)), props)
	sink := &nodeSink{node: "n2", delivered: map[string]int{}}
	b.ReportAllocs()
	for b.Loop() {
		m.Apply(entry(m, 3, pub), sink)
	}
}
