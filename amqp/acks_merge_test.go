package amqp

import (
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

func settleItem(ref *proto.ChannelRef, tags ...uint64) item {
	return item{m: &wire.BasicAck{}, cmd: &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ref, Tags: tags}}}}
}

func TestMergeSettles_PlainAcksBecomeOneSettle(t *testing.T) {
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	requeue := item{m: &wire.BasicNack{}, cmd: settleTags(ref, []uint64{3}, true, false)}
	run := []item{settleItem(ref, 1), settleItem(ref, 2), requeue, settleItem(ref, 4, 5), settleItem(ref, 6)}
	cmds, firsts, groups := mergeSettles(run)
	if len(cmds) != 2 || len(firsts) != 2 || len(groups) != 2 {
		t.Fatalf("%d commands, want the acks' Settle and the requeue", len(cmds))
	}
	if s := cmds[0].GetSettle(); !slices.Equal(s.GetTags(), []uint64{1, 2, 4, 5, 6}) || s.GetChannel() != ref {
		t.Fatalf("merged settle %v", s)
	}
	if cmds[1] != requeue.cmd || groups[1] != nil || firsts[1].cmd != requeue.cmd {
		t.Fatalf("the requeue was not kept as it was: %v", cmds[1])
	}
	if len(groups[0]) != 4 || firsts[0].cmd != run[0].cmd {
		t.Fatalf("merged settle carries %d acks, first %v", len(groups[0]), firsts[0].cmd)
	}
	// The acks' own commands are untouched, for a resubmission one by one.
	if !slices.Equal(run[0].cmd.GetSettle().GetTags(), []uint64{1}) || !slices.Equal(run[3].cmd.GetSettle().GetTags(), []uint64{4, 5}) {
		t.Fatalf("an ack's command changed: %v %v", run[0].cmd, run[3].cmd)
	}
	// A single ack goes as it came.
	if cmds, _, _ := mergeSettles(run[:1]); len(cmds) != 1 || cmds[0] != run[0].cmd {
		t.Fatalf("single ack: %v", cmds)
	}
}

// A run of plain acks only (a consumer acking each message) is one
// Settle of all their tags in order, carrying the whole run; past
// maxSettleTags the tags go in a Settle more.
func TestMergeSettles_ARunOfPlainAcksOnly(t *testing.T) {
	ref := &proto.ChannelRef{Node: "node-a", Connection: "c1", Channel: 1}
	run := []item{settleItem(ref, 7), settleItem(ref, 3, 4), settleItem(ref, 9)}
	cmds, firsts, groups := mergeSettles(run)
	if len(cmds) != 1 || len(firsts) != 1 || len(groups) != 1 || len(groups[0]) != 3 {
		t.Fatalf("%d commands, %d firsts, %d groups", len(cmds), len(firsts), len(groups))
	}
	if s := cmds[0].GetSettle(); !slices.Equal(s.GetTags(), []uint64{7, 3, 4, 9}) || s.GetChannel() != ref || cmds[0] == run[0].cmd {
		t.Fatalf("merged settle %v", cmds[0])
	}
	if firsts[0].cmd != run[0].cmd || groups[0][2].cmd != run[2].cmd {
		t.Fatalf("the Settle does not answer for the run's acks")
	}
	if !slices.Equal(run[0].cmd.GetSettle().GetTags(), []uint64{7}) || !slices.Equal(run[1].cmd.GetSettle().GetTags(), []uint64{3, 4}) {
		t.Fatalf("an ack's command changed: %v %v", run[0].cmd, run[1].cmd)
	}

	half := func(from uint64) []uint64 {
		tags := make([]uint64, maxSettleTags/2)
		for i := range tags {
			tags[i] = from + uint64(i)
		}
		return tags
	}
	big := []item{settleItem(ref, half(1)...), settleItem(ref, half(1<<20)...), settleItem(ref, 1<<30)}
	cmds, _, groups = mergeSettles(big)
	if len(cmds) != 2 || len(cmds[0].GetSettle().GetTags()) != maxSettleTags || len(groups[0]) != 2 || len(cmds[1].GetSettle().GetTags()) != 1 || len(groups[1]) != 1 {
		t.Fatalf("%d commands for %d tags: %d and %d tags", len(cmds), maxSettleTags+1, len(cmds[0].GetSettle().GetTags()), len(cmds[len(cmds)-1].GetSettle().GetTags()))
	}
}

// Acks that queued behind the batches in flight reach the log as one
// Settle; when the log refuses it (a Settle settles all its tags or none),
// they go again one by one and the channel is closed for the one refused.
func TestAcks_MergedSettleRefusedGoesAgainOneByOne(t *testing.T) {
	ts := startServer(t, Config{})
	release := make(chan struct{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if slices.Contains(c.GetSettle().GetTags(), 105) {
			return &proto.Result{Code: 406, Text: "PRECONDITION_FAILED - unknown delivery tag 105"}
		}
		return nil
	}, func(c *proto.Command) {
		if slices.Equal(c.GetSettle().GetTags(), []uint64{101}) {
			<-release
		}
	})
	conn, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	got := consumeLogTags(t, ts, ch, "q", 101, 102, 103, 104, 105, 106)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	c := ts.srv.lookupFirst().channel(1)
	eventually(t, 5*time.Second, "the first ack in flight", func() bool { return len(settledTags(ts.broker)) == 1 })
	// With every flight but one free, hold the others back until all are queued.
	c.acks.mu.Lock()
	c.acks.flights = maxAckFlights
	c.acks.mu.Unlock()
	for _, d := range got[1:] {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the acks queued", func() bool { return c.acks.queued() == 5 })
	c.acks.mu.Lock()
	c.acks.flights -= maxAckFlights - 1
	c.acks.changed.Broadcast()
	c.acks.mu.Unlock()
	close(release)
	select {
	case err := <-closed:
		if err == nil || err.Code != 406 || !strings.Contains(err.Reason, "unknown delivery tag 105") {
			t.Fatalf("channel closed with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel was not closed for the refused ack")
	}
	var merged, single [][]uint64
	for _, s := range commandsOf(ts.broker, (*proto.Command).GetSettle) {
		if len(s.GetTags()) > 1 {
			merged = append(merged, s.GetTags())
		} else {
			single = append(single, s.GetTags())
		}
	}
	if len(merged) != 1 || !slices.Equal(merged[0], []uint64{102, 103, 104, 105, 106}) {
		t.Fatalf("merged settles %v, want one naming 102-106", merged)
	}
	if want := [][]uint64{{101}, {102}, {103}, {104}, {105}}; !slices.EqualFunc(single[:min(len(single), 5)], want, slices.Equal) {
		t.Fatalf("single settles %v, want %v (then maybe 106)", single, want)
	}
	_ = conn
}
