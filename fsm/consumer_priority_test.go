package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func TestMachine_ConsumerPriorities(t *testing.T) {
	m := fsmtest.New(t)
	ch3 := &proto.ChannelRef{Node: "n3", Connection: "c3", Channel: 1}
	fsmtest.One(t, m, 1, declare("q", nil))
	prioritized := func(tag string, ch *proto.ChannelRef, prefetch uint32, prio int64) *proto.Command {
		c := consume("q", tag, ch, prefetch)
		c.GetConsume().Arguments = table("x-priority", i64(prio))
		return c
	}
	fsmtest.One(t, m, 1, consume("q", "lo", ch1, 0))
	fsmtest.One(t, m, 1, prioritized("hi1", ch2, 2, 10))
	fsmtest.One(t, m, 1, prioritized("hi2", ch3, 1, 10))
	m = roundTrip(t, m)
	var to string
	for i := 0; i < 6; i++ {
		_, rec := fsmtest.One(t, m, 2, publish("", "q", "m", nil))
		to += rec.Deliveries[0].Consumer.GetTag() + " "
	}
	// The two priority-10 consumers share until both are blocked (2 + 1
	// unacked), then the priority-0 one gets the rest.
	if to != "hi1 hi2 hi1 lo lo lo " {
		t.Fatalf("deliveries went to %q", to)
	}
	// An ack unblocks hi2: the next message is its.
	fsmtest.One(t, m, 3, settle(ch3, 1, false))
	if _, rec := fsmtest.One(t, m, 3, publish("", "q", "m", nil)); rec.Deliveries[0].Consumer.GetTag() != "hi2" {
		t.Fatalf("after hi2's ack: %s", rec.Deliveries[0].Consumer.GetTag())
	}
	// Once the high ones are gone, round-robin among the rest as before.
	fsmtest.Apply(t, m, 4, cancel("hi1", ch2), cancel("hi2", ch3))
	if _, rec := fsmtest.One(t, m, 4, publish("", "q", "m", nil)); rec.Deliveries[0].Consumer.GetTag() != "lo" {
		t.Fatal("lo did not get it")
	}
	// Lookahead credit beyond a prefetch does not keep a lower consumer
	// that is below its prefetch from the message; only when all are at
	// their prefetch does the credit count, highest first.
	fsmtest.Apply(t, m, 6, declare("la", nil))
	hi := consume("la", "hi", ch2, 1)
	hi.GetConsume().Credit = 5
	hi.GetConsume().Arguments = table("x-priority", i64(1))
	fsmtest.Apply(t, m, 6, hi, consume("la", "lo", ch3, 1))
	to = ""
	for i := 0; i < 4; i++ {
		_, rec := fsmtest.One(t, m, 6, publish("", "la", "m", nil))
		to += rec.Deliveries[0].Consumer.GetTag() + " "
	}
	if to != "hi lo hi hi " {
		t.Fatalf("with lookahead credit, deliveries went to %q", to)
	}
	bad := consume("q", "bad", ch1, 0)
	bad.GetConsume().Arguments = table("x-priority", str("a"))
	if r, _ := fsmtest.One(t, m, 5, bad); r.GetCode() != 406 ||
		r.GetText() != `PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got longstr"` {
		t.Fatalf("string x-priority: %d %q", r.GetCode(), r.GetText())
	}
}
