package fsm_test

import (
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func settleTags(ch *proto.ChannelRef, tags ...uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ch, Tags: tags}}}
}

// Unacked tells which of a channel's deliveries an acknowledgement still
// has to settle: what the state machine settled is gone from the answer.
func TestUnacked_NamesWhatIsStillTheChannels(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
	var tags []uint64
	for range 3 {
		_, rec := fsmtest.One(t, m, 3, publish("", "q", "x", nil))
		tags = append(tags, rec.Deliveries[0].DeliveryTag)
	}
	if got := m.Unacked(ch1, tags); !slices.Equal(got, tags) {
		t.Fatalf("Unacked = %v, want %v", got, tags)
	}
	if r, _ := fsmtest.One(t, m, 4, settleTags(ch1, tags[0], tags[2])); r.GetCode() != 0 {
		t.Fatalf("settle refused: %v", r)
	}
	if got := m.Unacked(ch1, []uint64{tags[2], tags[0], tags[1], tags[1]}); !slices.Equal(got, tags[1:2]) {
		t.Fatalf("Unacked after settling %d and %d = %v, want [%d]", tags[0], tags[2], got, tags[1])
	}
	if got := m.Unacked(ch2, tags); got != nil {
		t.Fatalf("another channel has %v", got)
	}
}

func nodeDown(node string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: node}}}
}

// A node declared down while it runs keeps its AMQP channels until it
// learns of it; whatever the log assigns later under the same channel's
// name must carry tags it never handed out, so that an ack of an old tag
// cannot settle a new delivery. The floor survives a snapshot.
func TestTags_NeverReusedAfterTheChannelIsGone(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
	var old []uint64
	for range 3 {
		_, rec := fsmtest.One(t, m, 3, publish("", "q", "x", nil))
		old = append(old, rec.Deliveries[0].DeliveryTag)
	}
	if _, rec := fsmtest.One(t, m, 4, nodeDown(ch1.GetNode())); !slices.Equal(rec.Down, []string{ch1.GetNode()}) {
		t.Fatalf("NodeDown effects %v, want the node named", rec.Down)
	}
	m = roundTrip(t, m)
	// The three requeued messages and a new one go to the consumer under
	// the channel's old name.
	var fresh []uint64
	_, rec := fsmtest.One(t, m, 5, consume("q", "c", ch1, 10))
	for _, d := range rec.Deliveries {
		fresh = append(fresh, d.DeliveryTag)
	}
	_, rec = fsmtest.One(t, m, 6, publish("", "q", "y", nil))
	for _, d := range rec.Deliveries {
		fresh = append(fresh, d.DeliveryTag)
	}
	if len(fresh) != 4 {
		t.Fatalf("%d deliveries after the consumer came back, want 4", len(fresh))
	}
	for _, f := range fresh {
		if slices.Contains(old, f) {
			t.Fatalf("tag %d handed out again after NodeDown (old %v, new %v)", f, old, fresh)
		}
	}
	// An ack of an old tag names nothing the channel holds now.
	if r, _ := fsmtest.One(t, m, 7, settleTags(ch1, old[0])); r.GetCode() != 406 {
		t.Fatalf("ack of stale tag %d: %v, want 406", old[0], r)
	}
}

func unseenRequeue(ch *proto.ChannelRef, tags ...uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch, Tags: tags, Unseen: true}}}
}

func channelClosed(ch *proto.ChannelRef) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch}}}
}

// A closing channel gives back what its node held and never wrote, unseen,
// in the entry of its ChannelClosed. Its consumer must be cancelled before
// that requeue: still registered, it gets the messages straight back (the
// requeue returned its credit) and ChannelClosed requeues them redelivered.
func TestHeldAtClose_GoBackUnflaggedWhenTheConsumerGoesFirst(t *testing.T) {
	for _, first := range []bool{false, true} {
		m := fsmtest.New(t)
		fsmtest.One(t, m, 2, declare("q", nil))
		fsmtest.One(t, m, 2, consume("q", "c", ch1, 10))
		var tags []uint64
		for range 3 {
			_, rec := fsmtest.One(t, m, 3, publish("", "q", "x", nil))
			tags = append(tags, rec.Deliveries[0].DeliveryTag)
		}
		// The node wrote the first delivery and held the other two.
		var cmds []*proto.Command
		if first {
			cmds = append(cmds, cancel("c", ch1))
		}
		cmds = append(cmds, unseenRequeue(ch1, tags[1:]...), channelClosed(ch1))
		fsmtest.Apply(t, m, 4, cmds...)
		_, rec := fsmtest.One(t, m, 5, consume("q", "d", ch2, 10))
		if len(rec.Deliveries) != 3 {
			t.Fatalf("%d deliveries to the next consumer, want the 3 messages", len(rec.Deliveries))
		}
		flagged := 0
		for _, d := range rec.Deliveries {
			if d.Redelivered {
				flagged++
			}
		}
		switch {
		case first && flagged != 1:
			t.Fatalf("cancel first: %d of 3 flagged redelivered, want only the one the client saw", flagged)
		case !first && flagged != 3:
			t.Fatalf("requeue first: %d of 3 flagged redelivered; the reason for cancelling first is gone", flagged)
		}
	}
}

// Gets names a channel's basic.get deliveries the state holds, not its
// consumers' deliveries, and not what was settled or requeued unseen.
func TestGets_NamesTheChannelsGetDeliveriesOnly(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	for range 4 {
		fsmtest.One(t, m, 2, publish("", "q", "x", nil))
	}
	var got []uint64
	for range 3 {
		r, _ := fsmtest.One(t, m, 3, get("q", false))
		got = append(got, r.GetGet().GetDeliveryTag())
	}
	_, rec := fsmtest.One(t, m, 4, consume("q", "c", ch1, 10))
	if len(rec.Deliveries) != 1 {
		t.Fatalf("the consumer got %d deliveries, want the one left", len(rec.Deliveries))
	}
	if tags := m.Gets(ch1); !slices.Equal(tags, got) {
		t.Fatalf("Gets = %v, want the gets' tags %v", tags, got)
	}
	fsmtest.One(t, m, 5, settleTags(ch1, got[0]))
	fsmtest.One(t, m, 5, &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch1, Tags: got[1:2], Unseen: true}}})
	if tags := m.Gets(ch1); !slices.Equal(tags, got[2:]) {
		t.Fatalf("Gets after a settle and an unseen requeue = %v, want %v", tags, got[2:])
	}
	if tags := m.Gets(ch2); tags != nil {
		t.Fatalf("another channel has %v", tags)
	}
}
