package fsm_test

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// A close that names what its client was sent returns only those flagged
// redelivered and counted; what the node held back or had not received
// goes back as RabbitMQ returns what it never sent. Below level 22, or
// with no list, every delivery counts as seen.
func TestMachine_CloseFlagsOnlyWhatTheClientSaw(t *testing.T) {
	seenOf := func(channel uint32, ranges ...uint64) []*proto.SeenDeliveries {
		return []*proto.SeenDeliveries{{Channel: channel, Group: 0, Ranges: ranges}}
	}
	conn2 := &proto.ConnectionRef{Node: ch2.GetNode(), Connection: ch2.GetConnection()}
	ch2b := &proto.ChannelRef{Node: ch2.GetNode(), Connection: ch2.GetConnection(), Channel: 2}
	for _, c := range []struct {
		name  string
		level uint32
		close func() []*proto.Command
		// flagged are the message numbers (1-8) that come back flagged.
		flagged map[int]bool
	}{
		{"channel close", fsm.Protocol, func() []*proto.Command {
			return []*proto.Command{{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch2,
				SeenListed: true, Seen: seenOf(1, 1, 2, 4, 4)}}}}
		}, map[int]bool{1: true, 2: true, 4: true}},
		{"connection close, two channels", fsm.Protocol, func() []*proto.Command {
			// Channel 2 holds messages 5-8 as its tags 1-4; a list of
			// another group's log names nothing here.
			seen := append(seenOf(1, 3, 3), seenOf(2, 2, 3)...)
			seen = append(seen, &proto.SeenDeliveries{Channel: 1, Group: 7, Ranges: []uint64{1, 4}})
			return []*proto.Command{{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{Connection: conn2,
				SeenListed: true, Seen: seen}}}}
		}, map[int]bool{3: true, 6: true, 7: true}},
		{"a connection's channel not named saw nothing", fsm.Protocol, func() []*proto.Command {
			return []*proto.Command{{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{Connection: conn2,
				SeenListed: true, Seen: seenOf(2, 1, 4)}}}}
		}, map[int]bool{5: true, 6: true, 7: true, 8: true}},
		{"no list", fsm.Protocol, func() []*proto.Command {
			return []*proto.Command{{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{Connection: conn2}}}}
		}, map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true}},
		{"below level 22", 21, func() []*proto.Command {
			return []*proto.Command{{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch2,
				SeenListed: true, Seen: seenOf(1, 1, 1)}}}}
		}, map[int]bool{1: true, 2: true, 3: true, 4: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fsmtest.NewAt(t, c.level)
			fsmtest.Apply(t, m, 1, declare("q", table("x-queue-type", str("quorum"))), declare("r", table("x-queue-type", str("quorum"))))
			for i := 1; i <= 4; i++ {
				fsmtest.One(t, m, 2, publish("", "q", fmt.Sprint(i), nil))
				fsmtest.One(t, m, 2, publish("", "r", fmt.Sprint(4+i), nil))
			}
			fsmtest.Apply(t, m, 3, consume("q", "c1", ch2, 0), consume("r", "c2", ch2b, 0))
			if ready(t, m, "q")+ready(t, m, "r") != 0 {
				t.Fatal("the consumers did not take every message")
			}
			fsmtest.Apply(t, m, 4, c.close()...)
			for _, q := range []string{"q", "r"} {
				for range 4 {
					r, _ := fsmtest.One(t, m, 5, get(q, true))
					g := r.GetGet()
					var n int
					fmt.Sscan(string(g.GetBody()), &n)
					count, _ := tableLookup(g.GetProperties().GetHeaders(), "x-delivery-count")
					if g.GetRedelivered() != c.flagged[n] || (count.GetInt64() == 1) != c.flagged[n] {
						t.Errorf("message %d: redelivered %v, x-delivery-count %d; want flagged %v", n, g.GetRedelivered(), count.GetInt64(), c.flagged[n])
					}
				}
			}
		})
	}
}

// The log refuses a list of seen deliveries it could not search: not
// pairs, not ascending, or a channel number out of range. The close
// without a list is what a node sends.
func TestValidate_SeenDeliveries(t *testing.T) {
	closing := func(s ...*proto.SeenDeliveries) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch1, SeenListed: true, Seen: s}}}
	}
	for _, c := range []struct {
		cmd  *proto.Command
		good bool
	}{
		{closing(&proto.SeenDeliveries{Channel: 1, Ranges: []uint64{1, 1, 3, 9}}), true},
		{closing(), true},
		{closing(&proto.SeenDeliveries{Channel: 1, Ranges: []uint64{1, 2, 3}}), false},
		{closing(&proto.SeenDeliveries{Channel: 1, Ranges: []uint64{5, 4}}), false},
		{closing(&proto.SeenDeliveries{Channel: 1, Ranges: []uint64{1, 5, 5, 6}}), false},
		{closing(&proto.SeenDeliveries{Channel: 65536, Ranges: []uint64{1, 1}}), false},
	} {
		err := fsm.Validate(c.cmd, fsm.Limits{})
		if (err == nil) != c.good {
			t.Errorf("%v: %v", c.cmd, err)
		}
	}
	if fsm.CommandProtocol(closing()) != 22 {
		t.Errorf("a listed close needs level %d, want 22", fsm.CommandProtocol(closing()))
	}
}
