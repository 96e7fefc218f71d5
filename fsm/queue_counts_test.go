package fsm_test

import (
	"slices"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// TestMachine_QueueCounts: each queue counts the copies routed to it, its
// deliveries and gets, acknowledgements (no-ack ones included) and
// redeliveries, and the bytes delivered and not yet acknowledged.
func TestMachine_QueueCounts(t *testing.T) {
	m := fsmtest.New(t)
	ch := &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1}
	fsmtest.One(t, m, 1, declare("a", nil))
	fsmtest.One(t, m, 1, declare("b", nil))
	for _, body := range []string{"one", "two", "three"} {
		fsmtest.One(t, m, 2, publish("", "a", body, nil))
	}
	fsmtest.One(t, m, 2, publish("", "b", "x", nil))
	fsmtest.One(t, m, 3, consume("a", "c", ch, 0)) // delivers one, two, three
	fsmtest.One(t, m, 4, settle(ch, 1, false))     // acks "one"
	fsmtest.One(t, m, 5, requeue(ch, 2, false))    // "two" comes back, redelivered
	fsmtest.One(t, m, 6, get("b", true))           // a no-ack get
	want := []fsm.QueueCounts{
		{Vhost: "/", Name: "a", Published: 3, Delivered: 4, Acked: 1, Redelivered: 1},
		{Vhost: "/", Name: "b", Published: 1, Delivered: 1, Acked: 1},
	}
	if got := m.QueueCounts(); !slices.Equal(got, want) {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	// Unacknowledged: "three" and the redelivered "two".
	qa, _ := m.Queue("/", "a")
	qs := m.Queues("/")
	if qa.GetUnackedBytes() != 8 || len(qs) != 2 || qs[0].GetUnackedBytes() != 8 || qs[1].GetUnackedBytes() != 0 {
		t.Fatalf("unacked bytes %v %v", qa, qs)
	}
}

// A consumer with look-ahead (credit above its prefetch) is assigned more
// than it may hold; its node writes prefetch of them and holds the rest.
// Every count shown outside takes the held ones as ready, as RabbitMQ
// shows the same queue: 200 messages, prefetch 30 read as 170 ready and
// 30 unacknowledged, here and after a snapshot round trip.
func TestMachine_HeldDeliveriesCountAsReady(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1, declare("q", nil))
	for i := 0; i < 200; i++ {
		fsmtest.One(t, m, 2, publish("", "q", "m", nil))
	}
	before, _ := m.Queue("/", "q")
	size := before.GetReadyBytes() / 200
	// Prefetch 30 with a look-ahead factor of 1: the log assigns 60.
	_, rec := fsmtest.One(t, m, 3, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "q",
		Prefetch: 30, Credit: 60, Consumer: &proto.ConsumerRef{Channel: ch1, Tag: "c"}}}})
	if len(rec.Deliveries) != 60 {
		t.Fatalf("%d assigned, want 60", len(rec.Deliveries))
	}
	check := func(x *fsm.Machine, ready, unacked uint64) {
		t.Helper()
		q, _ := x.Queue("/", "q")
		qs := x.Queues("/")
		st := x.Stats()
		cs := x.Consumers("/")
		if q.GetReady() != ready || q.GetUnacked() != unacked || q.GetReadyBytes() != ready*size || q.GetUnackedBytes() != unacked*size {
			t.Fatalf("queue %v, want ready %d unacked %d", q, ready, unacked)
		}
		if len(qs) != 1 || qs[0].GetReady() != ready || qs[0].GetUnacked() != unacked {
			t.Fatalf("queues %v", qs)
		}
		if st.Ready != ready || st.Unacked != unacked || st.ReadyBytes != ready*size {
			t.Fatalf("stats %+v, want ready %d unacked %d", st, ready, unacked)
		}
		if len(cs) != 1 || cs[0].GetUnacked() != min(unacked, 30) {
			t.Fatalf("consumers %v", cs)
		}
	}
	check(m, 170, 30)
	check(roundTrip(t, m), 170, 30)

	// declare-ok and get-ok count the held ones as ready.
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Passive: true}}}); r.GetMessageCount() != 170 || r.GetConsumerCount() != 1 {
		t.Fatalf("declare-ok %v, want 170 messages", r)
	}
	if r, _ := fsmtest.One(t, m, 5, &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: "q", NoAck: true, Channel: ch2}}}); r.GetGet().GetMessageCount() != 169 {
		t.Fatalf("get-ok %v, want 169 left", r)
	}
	// Acks free credit that the log fills again: still 30 written.
	fsmtest.One(t, m, 6, settle(ch1, 10, true))
	check(m, 159, 30)
	// Without look-ahead, everything assigned is unacknowledged.
	fsmtest.One(t, m, 7, cancel("c", ch1))
	fsmtest.One(t, m, 8, &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch1}}})
	fsmtest.One(t, m, 9, consume("q", "d", ch1, 30))
	q, _ := m.Queue("/", "q")
	if q.GetReady() != 159 || q.GetUnacked() != 30 {
		t.Fatalf("without look-ahead %v", q)
	}
}
