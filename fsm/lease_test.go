package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// placedDeclare is the declare the metadata's record placed at makes in
// a queue group's log (groupDeclare).
func placedDeclare(name string, at uint64) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: name, Durable: true, PlacedAt: at}}}
}

func expireQueue(name string) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: &proto.QueueRef{Vhost: "/", Name: name}}}}
}

// From level 23 a queue group runs a placed queue's lease, a policy's
// expires included, and a lease that runs out ends the queue there: gone
// for every use, its messages dropped (not dead-lettered, as RabbitMQ
// deletes an expired queue), its name kept under the metadata record it
// was declared from until the metadata no longer places it there. A
// declare from the same record is refused; one from another record (the
// queue declared again in the metadata) takes the name back.
func TestLeases_AQueueGroupEndsAQueueWhoseLeaseRanOut(t *testing.T) {
	expires := policySet("exp", "^q$", 0, false, &proto.PolicyDefinition{Expires: ptr(int64(100)), DeadLetterExchange: ptr("amq.fanout")})
	m := queueGroup(t, 3, placedDeclare("q", 7), expires, declare("dead", nil), bind("amq.fanout", "dead", "", false, nil))
	applyOK(t, m, 3, fsmtest.Enqueue("/", "", "q", "body", nil, "q"))
	due, ok := m.NextLeaseDue()
	if !ok || len(m.DueLeases(due)) != 1 {
		t.Fatalf("a placed queue's policy lease is not due in its group at level %d", fsm.Protocol)
	}
	if r, _ := fsmtest.One(t, m, due-1, expireQueue("q")); r.GetQueue() != "" || !m.HasQueue("/", "q") || m.Ended("/", "q") {
		t.Fatalf("ended before its lease ran out: %v", r)
	}
	if r, _ := fsmtest.One(t, m, due, expireQueue("q")); r.GetQueue() != "q" {
		t.Fatalf("ExpireQueue at the lease's end: %v", r)
	}
	if got := m.EndedQueues(); len(got) != 1 || got[0] != (fsm.EndedQueue{Vhost: "/", Name: "q", PlacedAt: 7}) {
		t.Fatalf("ended %v, want q under record 7", got)
	}
	if _, ok := m.Queue("/", "q"); ok {
		t.Fatal("an ended queue is still listed")
	}
	if n := ready(t, m, "dead"); n != 0 {
		t.Fatalf("the ended queue's message was dead-lettered (%d)", n)
	}
	for name, c := range map[string]*proto.Command{
		"passive declare":      {Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "q", Passive: true}}},
		"declare, same record": placedDeclare("q", 7),
		"consume":              consume("q", "t", ch1, 1),
		"get":                  get("q", false),
	} {
		if r, _ := fsmtest.One(t, m, due+1, c); r.GetCode() != replycode.NotFound {
			t.Errorf("%s of an ended queue: %d %s, want 404", name, r.GetCode(), r.GetText())
		}
	}
	applyOK(t, m, due+1, fsmtest.Enqueue("/", "", "q", "late", nil, "q"))
	if _, ok := m.Queue("/", "q"); ok || !m.EndedUnder("/", "q", 7) || m.EndedUnder("/", "q", 8) {
		t.Fatal("an enqueue, or a declare from its record, brought an ended queue back")
	}

	// The snapshot and the digest hold the ended queue and its record.
	n := roundTrip(t, m)
	if !n.EndedUnder("/", "q", 7) || n.EndedUnder("/", "q", 8) {
		t.Fatal("restored without the ended queue's record")
	}
	other := roundTrip(t, m)
	applyOK(t, other, due+2, placedDeclare("q", 8))
	if !other.HasQueue("/", "q") || other.Ended("/", "q") || ready(t, other, "q") != 0 {
		t.Fatal("a declare from another record did not take the name back, empty")
	}
	applyOK(t, m, due+2, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}})
	if m.Ended("/", "q") || len(m.EndedQueues()) != 0 {
		t.Fatal("the mirror's delete did not forget the ended queue")
	}
	if m.Digest() == n.Digest() {
		t.Fatal("the digest does not hold the ended queue")
	}
}

// A lease in a group at level 22 deletes the queue as it always did, and
// a snapshot at 22 is written in a format without ended queues.
func TestLeases_AQueueGroupAtLevel22DeletesAsBefore(t *testing.T) {
	m := queueGroupAt(t, 22, 3, declare("own", table("x-expires", i64(100))))
	applyOK(t, m, 1000, expireQueue("own"))
	if _, ok := m.Queue("/", "own"); ok || m.Ended("/", "own") {
		t.Fatal("not deleted as before level 23")
	}
	if b, _ := snapshotBytes(t, m); b[4] != 14 {
		t.Fatalf("format %d at level 22, want 14", b[4])
	}
}

// The metadata records which entry placed each queue, and deletes a
// queue whose lease ended in its group, bindings and all, only while it
// still places it there under that record: a queue deleted and declared
// again meanwhile is another queue. A record placed below level 23 (0)
// matches any. A queue group's log refuses the command.
func TestLeases_TheMetadataDeletesTheRecordTheGroupEnded(t *testing.T) {
	m := placing(t, "q1", "q2")
	applyOK(t, m, 3, placedDeclare("q", 0), bind("amq.direct", "q", "k", false, nil))
	g, at, ok := m.PlacedAt("/", "q")
	if !ok || g != "q1" || at == 0 {
		t.Fatalf("placed in %q at %d (%v), want q1 at its entry", g, at, ok)
	}
	if d, _ := m.PlacedDeclare("q1", "/", "q"); d.GetPlacedAt() != at {
		t.Fatalf("the group's declare names record %d, want %d", d.GetPlacedAt(), at)
	}
	for _, c := range []*proto.Command{
		fsmtest.QueueLeaseEnded("/", "q", "q2", at),
		fsmtest.QueueLeaseEnded("/", "q", "q1", at+1),
		fsmtest.QueueLeaseEnded("/", "nosuch", "q1", at),
		fsmtest.QueueLeaseEnded("/nosuch", "q", "q1", at),
	} {
		if r, _ := fsmtest.One(t, m, 4, c); r.GetCode() != 0 || r.GetQueue() != "" {
			t.Fatalf("%v: %v", c, r)
		}
	}
	if _, _, ok := m.PlacedAt("/", "q"); !ok {
		t.Fatal("deleted by a lease that ended for another group or record")
	}
	if r, _ := fsmtest.One(t, m, 4, fsmtest.QueueLeaseEnded("/", "q", "q1", at)); r.GetQueue() != "q" {
		t.Fatalf("the record's own lease end: %v", r)
	}
	if _, _, ok := m.PlacedAt("/", "q"); ok {
		t.Fatal("still placed after its lease ended")
	}
	if qs, _, _ := m.Route("/", "amq.direct", []string{"k"}, nil); len(qs) != 0 {
		t.Fatalf("its binding still routes to %v", qs)
	}

	applyOK(t, m, 5, placedDeclare("old", 0))
	applyOK(t, m, 6, fsmtest.QueueLeaseEnded("/", "old", placementOf(t, m, "old"), 0))
	if _, _, ok := m.PlacedAt("/", "old"); ok {
		t.Fatal("a lease ended under record 0 did not delete")
	}

	grp := queueGroup(t, 3)
	if r, _ := fsmtest.One(t, grp, 2, fsmtest.QueueLeaseEnded("/", "q", "q1", 0)); r.GetCode() != replycode.PreconditionFailed {
		t.Fatalf("a queue group's log took QueueLeaseEnded: %v", r)
	}
	old := fsmtest.NewAt(t, 22)
	if r, _ := fsmtest.One(t, old, 2, fsmtest.QueueLeaseEnded("/", "q", "q1", 0)); r.GetCode() != replycode.NotImplemented {
		t.Fatalf("a log at level 22 took QueueLeaseEnded: %v", r)
	}
	if p := fsm.CommandProtocol(placedDeclare("q", 3)); p != 23 {
		t.Fatalf("a declare naming its record needs level %d, want 23", p)
	}
}
