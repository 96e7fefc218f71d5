package fsm_test

import (
	"fmt"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func sacArgs() *proto.Table {
	return table("x-single-active-consumer", &proto.Value{Kind: &proto.Value_Bool{Bool: true}})
}

func statuses(m *fsm.Machine) string {
	var s string
	for _, c := range m.Consumers("/") {
		s += fmt.Sprintf("%s:%v:%s ", c.GetConsumer().GetTag(), c.GetActive(), c.GetActivityStatus())
	}
	return s
}

func bodiesOf(ds []*fsm.Delivery) string {
	var s string
	for _, d := range ds {
		s += string(d.Body)
	}
	return s
}

func TestMachine_SingleActiveConsumerCancel(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", sacArgs()))
	fsmtest.One(t, m, 1, consume("q", "first", ch1, 5))
	fsmtest.One(t, m, 1, consume("q", "second", ch2, 5))
	if got := statuses(m); got != "first:true:single_active second:false:waiting " {
		t.Fatalf("listing %q", got)
	}
	var first, second string
	for i := 0; i < 20; i++ {
		_, rec := fsmtest.One(t, m, 2, publish("", "q", string(rune('a'+i)), nil))
		for _, d := range rec.Deliveries {
			if d.Consumer.GetTag() != "first" {
				t.Fatalf("message %d went to %s", i, d.Consumer.GetTag())
			}
			first += string(d.Body)
			fsmtest.One(t, m, 2, settle(ch1, d.DeliveryTag, false))
		}
	}
	if first != "abcdefghijklmnopqrst" {
		t.Fatalf("first got %q", first)
	}
	// Queue up more while first holds its prefetch, then cancel it.
	fsmtest.One(t, m, 3, &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ch1, Multiple: true}}})
	for i := 0; i < 8; i++ {
		fsmtest.One(t, m, 3, publish("", "q", fmt.Sprint(i), nil))
	}
	m = roundTrip(t, m)
	_, rec := fsmtest.One(t, m, 4, cancel("first", ch1))
	second = bodiesOf(rec.Deliveries)
	if got := statuses(m); got != "second:true:single_active " {
		t.Fatalf("listing after cancel %q", got)
	}
	// first's 5 unacked stay on its channel; second gets the other 3 now.
	if second != "567" {
		t.Fatalf("second got %q on taking over", second)
	}
	// first's channel closes: its deliveries come back, to second, in order.
	_, rec = fsmtest.One(t, m, 5, requeue(ch1, 0, true))
	if got := bodiesOf(rec.Deliveries); got != "01" {
		t.Fatalf("after first's requeue second got %q (prefetch 5 holds 3)", got)
	}
}

// When the active consumer's channel closes (or its node goes down), its
// unacked messages return before the next consumer takes over, so the
// queue's order holds.
func TestMachine_SingleActiveConsumerNodeDownKeepsOrder(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", sacArgs()))
	fsmtest.One(t, m, 1, consume("q", "first", ch1, 3))
	fsmtest.One(t, m, 1, consume("q", "second", ch2, 100))
	ch3 := &proto.ChannelRef{Node: "n3", Connection: "c3", Channel: 1}
	fsmtest.One(t, m, 1, consume("q", "third", ch3, 100))
	for i := 0; i < 10; i++ {
		fsmtest.One(t, m, 2, publish("", "q", fmt.Sprint(i), nil))
	}
	_, rec := fsmtest.One(t, m, 3, &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: "n1"}}})
	if got := bodiesOf(rec.Deliveries); got != "0123456789" {
		t.Fatalf("after NodeDown the next consumer got %q", got)
	}
	for _, d := range rec.Deliveries {
		if d.Consumer.GetTag() != "second" {
			t.Fatalf("delivered to %s", d.Consumer.GetTag())
		}
	}
	if got := statuses(m); got != "second:true:single_active third:false:waiting " {
		t.Fatalf("listing %q", got)
	}
	// A round-robin queue lists every consumer up.
	fsmtest.One(t, m, 4, declare("rr", nil))
	fsmtest.One(t, m, 4, consume("rr", "x", ch3, 0))
	if got := statuses(m); got != "second:true:single_active third:false:waiting x:true:up " {
		t.Fatalf("listing %q", got)
	}
	if r, _ := fsmtest.One(t, m, 5, declare("bad", table("x-single-active-consumer", str("yes")))); r.GetCode() != 406 ||
		r.GetText() != "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue 'bad' in vhost '/': {unacceptable_type,longstr}" {
		t.Fatalf("string flag: %d %q", r.GetCode(), r.GetText())
	}
}

// A consumer with lookahead credit is cancelled while its node holds
// deliveries it never wrote: the node hands them back unseen after the
// Cancel, and the next consumer gets them before the messages behind.
func TestMachine_SingleActiveConsumerCancelWithHeldDeliveries(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", sacArgs()))
	a := consume("q", "a", ch1, 2)
	a.GetConsume().Credit = 6
	fsmtest.One(t, m, 1, a)
	fsmtest.One(t, m, 1, consume("q", "b", ch2, 0))
	for i := 0; i < 8; i++ {
		fsmtest.One(t, m, 2, publish("", "q", fmt.Sprint(i), nil))
	}
	// a was assigned 0..5: its node wrote 0 and 1 and holds 2..5.
	_, rec := fsmtest.One(t, m, 3, cancel("a", ch1))
	if len(rec.Deliveries) != 0 {
		t.Fatalf("b activated before the held deliveries came back: %q", bodiesOf(rec.Deliveries))
	}
	held := &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch1, Tags: []uint64{3, 4, 5, 6}, Unseen: true}}}
	_, rec = fsmtest.One(t, m, 3, held)
	if got := bodiesOf(rec.Deliveries); got != "234567" {
		t.Fatalf("b got %q, want the held 2..5 first", got)
	}
	// Without lookahead nothing is held: b takes over at the cancel.
	fsmtest.One(t, m, 4, declare("r", sacArgs()))
	fsmtest.One(t, m, 4, consume("r", "c", ch1, 1))
	fsmtest.One(t, m, 4, consume("r", "d", ch2, 0))
	fsmtest.Apply(t, m, 4, publish("", "r", "x", nil), publish("", "r", "y", nil))
	if _, rec = fsmtest.One(t, m, 5, cancel("c", ch1)); bodiesOf(rec.Deliveries) != "y" {
		t.Fatalf("plain cancel: b got %q", bodiesOf(rec.Deliveries))
	}
}
