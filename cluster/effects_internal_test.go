package cluster

import (
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// tagSink records the tags of the deliveries handed to it.
type tagSink struct {
	fsm.DiscardSink
	tags []uint64
}

func (s *tagSink) Deliver(d *fsm.Delivery) { s.tags = append(s.tags, d.DeliveryTag) }

// A follower hands its channel each delivery once: a sync after a break
// brings the channel's unsettled deliveries, of which only those past the
// last it handed are new; a channel the log no longer holds, or one this
// node closed, numbers its deliveries from 1 again.
func TestEffectsFollower_ASyncHandsOnlyWhatTheChannelMissed(t *testing.T) {
	ch := &proto.ChannelRef{Node: "x", Connection: "c", Channel: 1}
	del := func(tag uint64) *proto.RemoteDelivery {
		return &proto.RemoteDelivery{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t"}, DeliveryTag: tag, Body: []byte("b")}
	}
	live := func(tags ...uint64) []*proto.Effect {
		var es []*proto.Effect
		for _, tag := range tags {
			es = append(es, &proto.Effect{Kind: &proto.Effect_Deliver{Deliver: del(tag)}})
		}
		return es
	}
	syncOf := func(tags ...uint64) *proto.EffectsSync {
		sc := &proto.SyncChannel{Channel: ch}
		for _, tag := range tags {
			sc.Deliveries = append(sc.Deliveries, del(tag))
		}
		return &proto.EffectsSync{Channels: []*proto.SyncChannel{sc}}
	}
	f := &effectsFollower{last: map[string]uint64{}}
	s := &tagSink{}
	f.sync(s, &proto.EffectsSync{})
	f.hand(s, live(1, 2, 3))
	// 1 was settled; 4 and 5 were assigned while the stream was down.
	f.sync(s, syncOf(2, 3, 4, 5))
	if want := []uint64{1, 2, 3, 4, 5}; !slices.Equal(s.tags, want) {
		t.Fatalf("handed %v, want %v", s.tags, want)
	}
	// The channel closed and opened again in the log meanwhile: gone
	// from the sync, then numbered from 1.
	f.sync(s, &proto.EffectsSync{})
	f.sync(s, syncOf(1))
	if want := []uint64{1, 2, 3, 4, 5, 1}; !slices.Equal(s.tags, want) {
		t.Fatalf("after the channel came back: handed %v, want %v", s.tags, want)
	}
	// This node closes it, opens it again, and the stream breaks before
	// the new channel's first delivery came.
	f.forget([]*proto.Command{{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch}}}})
	f.sync(s, syncOf(1))
	if want := []uint64{1, 2, 3, 4, 5, 1, 1}; !slices.Equal(s.tags, want) {
		t.Fatalf("after this node closed the channel: handed %v, want %v", s.tags, want)
	}
}
