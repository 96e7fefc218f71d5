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
