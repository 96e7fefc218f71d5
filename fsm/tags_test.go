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
