package group

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// A close naming what its client saw goes to a log below level 22
// without the list (a server of an earlier release would refuse it), and
// as it is from 22 on. The caller's commands stay as they were: the same
// close goes to several logs, which may stand at different levels.
func TestSubmitter_LeavesTheSeenListOutBelowItsLevel(t *testing.T) {
	seen := []*proto.SeenDeliveries{{Channel: 1, Ranges: []uint64{1, 4}}}
	ref := &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1}
	for _, level := range []uint32{fsm.SeenAtCloseLevel - 1, fsm.SeenAtCloseLevel} {
		s := NewSubmitter(SubmitterConfig{State: &State{m: fsmtest.NewAt(t, level)}})
		cmds := []*proto.Command{
			{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}},
			{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ref, Seen: seen, SeenListed: true}}},
			{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{
				Connection: &proto.ConnectionRef{Node: "n1", Connection: "c1"}, Seen: seen, SeenListed: true}}},
		}
		out := s.gateSeen(cmds)
		keeps := level >= fsm.SeenAtCloseLevel
		for i, c := range out[1:] {
			listed := c.GetChannelClosed().GetSeenListed() || c.GetConnectionClosed().GetSeenListed()
			n := len(c.GetChannelClosed().GetSeen()) + len(c.GetConnectionClosed().GetSeen())
			if listed != keeps || (n > 0) != keeps {
				t.Errorf("level %d: command %d listed %v with %d lists, want listed %v", level, i+1, listed, n, keeps)
			}
			if fsm.CommandProtocol(c) > level {
				t.Errorf("level %d: command %d needs level %d", level, i+1, fsm.CommandProtocol(c))
			}
		}
		if out[1].GetChannelClosed().GetChannel() != ref || out[0] != cmds[0] {
			t.Errorf("level %d: the close's channel or another command changed", level)
		}
		if !cmds[1].GetChannelClosed().GetSeenListed() || !cmds[2].GetConnectionClosed().GetSeenListed() {
			t.Errorf("level %d: the caller's commands changed", level)
		}
	}
}

// A Credit with a prefetch (a basic.qos for a running consumer) goes to a
// log below level 25 without it, its credit kept, and as it is from 25
// on; a node without state leaves it to the leader's log.
func TestSubmitter_LeavesTheQosPrefetchOutBelowItsLevel(t *testing.T) {
	credit := func() *proto.Command {
		p := uint32(9)
		return &proto.Command{Cmd: &proto.Command_Credit{Credit: &proto.Credit{
			Consumer: &proto.ConsumerRef{Channel: &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1}, Tag: "c"},
			Credit:   9, Prefetch: &p}}}
	}
	for _, level := range []uint32{fsm.QosLevel - 1, fsm.QosLevel} {
		c := credit()
		NewSubmitter(SubmitterConfig{State: &State{m: fsmtest.NewAt(t, level)}}).gateQos([]*proto.Command{c})
		keeps := level >= fsm.QosLevel
		if (c.GetCredit().Prefetch != nil) != keeps || c.GetCredit().GetCredit() != 9 {
			t.Errorf("level %d: prefetch kept %v, credit %d; want kept %v, credit 9", level, c.GetCredit().Prefetch != nil, c.GetCredit().GetCredit(), keeps)
		}
		if fsm.CommandProtocol(c) > level {
			t.Errorf("level %d: the Credit needs level %d", level, fsm.CommandProtocol(c))
		}
	}
	c := credit()
	NewSubmitter(SubmitterConfig{}).gateQos([]*proto.Command{c})
	if c.GetCredit().Prefetch == nil {
		t.Error("a submitter with no state cleared Credit.prefetch")
	}
}
