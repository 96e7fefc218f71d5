package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// NodeChannels gives what a node that missed its effects needs to catch
// up: each of its channels, the consumers on it, and the deliveries to
// them still unsettled, as Deliver gave them; another node's channels,
// settled deliveries and basic.get's are not in it.
func TestNodeChannels_AreWhatTheNodeHoldsUnsettled(t *testing.T) {
	m := fsmtest.New(t)
	x := &proto.ChannelRef{Node: "x", Connection: "c1", Channel: 1}
	y := &proto.ChannelRef{Node: "y", Connection: "c2", Channel: 1}
	fsmtest.Apply(t, m, 1, declare("q", nil), declare("other", nil))
	fsmtest.Apply(t, m, 2, publish("", "other", "got", nil))
	fsmtest.Apply(t, m, 3, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "other", Channel: x}}})
	_, rec := fsmtest.Apply(t, m, 4, consume("q", "cx", x, 10), consume("q", "cy", y, 10),
		publish("", "q", "a", nil), publish("", "q", "b", nil), publish("", "q", "c", nil), publish("", "q", "d", nil))
	var toX []uint64
	for _, d := range rec.Deliveries {
		if d.Consumer.GetChannel().GetNode() == "x" {
			toX = append(toX, d.DeliveryTag)
		}
	}
	if len(toX) < 2 {
		t.Fatalf("x got %v: want two deliveries or more to settle one", toX)
	}
	fsmtest.Apply(t, m, 5, settle(x, toX[0], false))

	got := m.NodeChannels("x")
	if len(got) != 1 || got[0].Ref.GetConnection() != "c1" {
		t.Fatalf("channels of x: %+v", got)
	}
	if cs := got[0].Consumers; len(cs) != 1 || cs[0].GetTag() != "cx" {
		t.Fatalf("consumers of x's channel: %v", cs)
	}
	ds := got[0].Deliveries
	if len(ds) != len(toX)-1 {
		t.Fatalf("x's unsettled deliveries: %d, want %d (its consumer's, less the settled one; not the get's)", len(ds), len(toX)-1)
	}
	for i, d := range ds {
		if d.DeliveryTag != toX[i+1] || d.Consumer.GetTag() != "cx" || d.RoutingKey != "q" || len(fsmtest.Body(d.BodyRef)) == 0 && len(d.Body) == 0 {
			t.Fatalf("delivery %d: %+v, want tag %d of cx with its message", i, d, toX[i+1])
		}
	}
	if got := m.NodeChannels("z"); len(got) != 0 {
		t.Fatalf("a node with no channels has %+v", got)
	}
}
