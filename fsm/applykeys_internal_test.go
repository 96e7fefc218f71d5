package fsm

import (
	"math"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// An ack finds its channel under the key the channel was stored by, and
// keys sort by channel number within a connection.
func TestApplyChannel_FindsTheChannelStored(t *testing.T) {
	s := &state{channels: map[string]*channel{}}
	refs := []*proto.ChannelRef{
		{},
		{Node: "n1", Connection: "c1", Channel: 1},
		{Node: "n\x00x", Connection: "c", Channel: 65535},
		{Node: "node-with-a-long-name", Connection: "10.0.0.1:5672 -> 10.0.0.2:40000", Channel: math.MaxUint32},
	}
	for _, ref := range refs {
		want := s.channel(ref)
		if got, ok := s.applyChannel(ref); !ok || got != want {
			t.Fatalf("%v: applyChannel found %v, %v; want the channel stored", ref, got, ok)
		}
	}
	if _, ok := s.applyChannel(&proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 2}); ok {
		t.Fatal("applyChannel found a channel never stored")
	}
	if a, b := chanKey(&proto.ChannelRef{Node: "n", Connection: "c", Channel: 9}), chanKey(&proto.ChannelRef{Node: "n", Connection: "c", Channel: 10}); a >= b {
		t.Fatalf("channel 9's key %q sorts after channel 10's %q", a, b)
	}
}

// A channel's list of deliveries emptied by acks keeps a small array for
// the next delivery and lets a large one go.
func TestDropFront_KeepsASmallArrayOnly(t *testing.T) {
	small := make([]*unacked, 3, 8)
	if got := dropFront(small, 1); len(got) != 2 || cap(got) != 7 {
		t.Fatalf("part dropped: len %d cap %d, want 2 and 7", len(got), cap(got))
	}
	if got := dropFront(small, 3); len(got) != 0 || cap(got) != 8 {
		t.Fatalf("small emptied: len %d cap %d, want its array kept", len(got), cap(got))
	}
	large := make([]*unacked, keptUnackedCap+1)
	if got := dropFront(large, len(large)); got != nil {
		t.Fatalf("large emptied: cap %d kept, want none", cap(got))
	}
}
