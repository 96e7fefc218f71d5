package amqp

import (
	"slices"
	"testing"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

// The ledger is pure: these tests drive it with a clock of their own
// (now, unix ms) and read what it asks the channel to do.

const t0 = int64(1_700_000_000_000)

// dl is a delivery of log tag for consumer, dying at deadline (0: never).
func dl(consumer string, logTag uint64, deadline int64) *fsm.Delivery {
	if deadline == 0 {
		deadline = ttl.NoDeadline
	}
	return &fsm.Delivery{Consumer: &proto.ConsumerRef{Tag: consumer}, DeliveryTag: logTag, Deadline: deadline}
}

// g0 names log tags of the metadata group's log (group 0).
func g0(tags ...uint64) []logRef {
	out := make([]logRef, len(tags))
	for i, t := range tags {
		out[i] = logRef{tag: t}
	}
	return out
}

// started is a ledger with registered consumers: those in look-ahead get a
// window of prefetch 2, the others none.
func started(t *testing.T, plain []string, lookahead []string) *ledger {
	t.Helper()
	l := newLedger()
	for _, c := range plain {
		l.startConsume(c, 0, 0)
		if ok, _ := l.consumed(c, true); !ok {
			t.Fatalf("consumer %s not active", c)
		}
	}
	for _, c := range lookahead {
		l.startConsume(c, 2, 3)
		if ok, _ := l.consumed(c, true); !ok {
			t.Fatalf("consumer %s not active", c)
		}
	}
	return l
}

// writes lists "wire:log" pairs of what a to write.
func writes(a actions) [][2]uint64 {
	var out [][2]uint64
	for _, n := range a.writes {
		out = append(out, [2]uint64{n.wire, n.d.DeliveryTag})
	}
	return out
}

// feed delivers each delivery at now and returns what was written.
func feed(l *ledger, now int64, ds ...*fsm.Delivery) [][2]uint64 {
	var out [][2]uint64
	for _, d := range ds {
		out = append(out, writes(l.deliver(d, now))...)
	}
	return out
}

func ack(tag uint64, multiple bool) wire.Method {
	return &wire.BasicAck{DeliveryTag: tag, Multiple: multiple}
}

// Acknowledgements are translated from wire tags to the log's: ranges
// cover only what was written up to the tag, whatever consumer it went
// to, and an unknown, repeated or already covered tag is 406.
func TestLedger_Acks(t *testing.T) {
	// Consumer "a" (prefetch 2, look-ahead) is assigned log tags 1, 2, 3;
	// "b" (no window) log tag 4 after them. Written: wire 1 = log 1,
	// wire 2 = log 2, wire 3 = log 4; log 3 is held.
	setup := func(t *testing.T) *ledger {
		l := started(t, []string{"b"}, []string{"a"})
		got := feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0), dl("b", 4, 0))
		if want := [][2]uint64{{1, 1}, {2, 2}, {3, 4}}; !slices.Equal(got, want) {
			t.Fatalf("written %v, want %v", got, want)
		}
		return l
	}
	for _, c := range []struct {
		name string
		// before are acknowledgements taken first, each must succeed.
		before []wire.Method
		m      wire.Method
		tags   []uint64    // log tags named
		writes [][2]uint64 // wire:log written on the way
		code   uint16      // expected error, 0 for none
	}{
		{name: "single", m: ack(1, false), tags: []uint64{1}, writes: [][2]uint64{{4, 3}}},
		{name: "single of another consumer frees no window", m: ack(3, false), tags: []uint64{4}},
		{name: "multiple covers what was written up to the tag", m: ack(2, true), tags: []uint64{1, 2}, writes: [][2]uint64{{4, 3}}},
		{name: "multiple tag 0 takes everything written", m: ack(0, true), tags: []uint64{1, 2, 4}, writes: [][2]uint64{{4, 3}}},
		{name: "multiple skips what was acked singly", before: []wire.Method{ack(2, false)}, m: ack(3, true), tags: []uint64{1, 4}},
		{name: "nack multiple with requeue", m: &wire.BasicNack{DeliveryTag: 3, Multiple: true, Requeue: true}, tags: []uint64{1, 2, 4}, writes: [][2]uint64{{4, 3}}},
		{name: "reject", m: &wire.BasicReject{DeliveryTag: 2}, tags: []uint64{2}, writes: [][2]uint64{{4, 3}}},
		// The first ack writes the held log tag 3, the second takes it.
		{name: "tag 0 multiple with nothing outstanding is a no-op", before: []wire.Method{ack(0, true), ack(0, true)}, m: ack(0, true)},
		{name: "unknown tag", m: ack(9, false), code: replycode.PreconditionFailed},
		{name: "unknown tag with multiple", m: ack(9, true), code: replycode.PreconditionFailed},
		{name: "tag 0 without multiple", m: ack(0, false), code: replycode.PreconditionFailed},
		{name: "repeated tag", before: []wire.Method{ack(1, false)}, m: ack(1, false), code: replycode.PreconditionFailed},
		{name: "tag covered by a multiple ack", before: []wire.Method{ack(3, true)}, m: &wire.BasicNack{DeliveryTag: 2}, code: replycode.PreconditionFailed},
		{name: "held tag not written yet", m: ack(4, false), code: replycode.PreconditionFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := setup(t)
			for _, m := range c.before {
				if _, _, _, e := l.ack(m, false, t0); e != nil {
					t.Fatalf("before: %v", e)
				}
			}
			tags, pending, a, e := l.ack(c.m, false, t0)
			if c.code != 0 {
				if e == nil || e.Code != c.code || e.Hard || e.ClassID != c.m.ClassID() || e.MethodID != c.m.MethodID() {
					t.Fatalf("error %+v, want a channel error %d of %s", e, c.code, c.m.Name())
				}
				return
			}
			if e != nil {
				t.Fatalf("error %v", e)
			}
			if !slices.Equal(tags, g0(c.tags...)) || pending != nil || !slices.Equal(writes(a), c.writes) {
				t.Fatalf("tags %v pending %v writes %v, want tags %v writes %v", tags, pending, writes(a), c.tags, c.writes)
			}
		})
	}
}

// In a transaction an acknowledgement is read at arrival and taken at
// commit; acking the same tag twice in it settles it once.
func TestLedger_TransactionTakesAtCommit(t *testing.T) {
	l := started(t, nil, []string{"a"})
	feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0))
	tags, p1, a, e := l.ack(ack(1, false), true, t0)
	if e != nil || !slices.Equal(tags, g0(1)) || len(a.writes) != 0 {
		t.Fatalf("tx ack: tags %v writes %v err %v; want log tag 1, nothing written before commit", tags, writes(a), e)
	}
	_, p2, _, e := l.ack(ack(1, false), true, t0)
	if e != nil {
		t.Fatalf("a tag read, not taken, is still known in the transaction: %v", e)
	}
	a = l.commit(append(p1, p2...), t0)
	if got := writes(a); !slices.Equal(got, [][2]uint64{{3, 3}}) {
		t.Fatalf("commit wrote %v, want log tag 3 as wire 3 (one credit back)", got)
	}
	if _, _, _, e := l.ack(ack(1, false), false, t0); e == nil {
		t.Fatal("wire tag 1 still known after its commit")
	}
}

// A held delivery is still the queue's: it goes back unseen at its
// deadline (the timer the ledger arms for it), and one that reaches the
// node past its deadline plus the grace is never written.
func TestLedger_HeldExpiry(t *testing.T) {
	l := started(t, nil, []string{"a"})
	due, later := t0+1000, t0+5000
	a := l.deliver(dl("a", 1, 0), t0)
	a2 := l.deliver(dl("a", 2, 0), t0)
	if len(a.writes)+len(a2.writes) != 2 {
		t.Fatal("the window's first two are written")
	}
	if a := l.deliver(dl("a", 3, later), t0); a.arm != later || len(a.writes) != 0 {
		t.Fatalf("held with deadline %d: arm %d writes %v", later, a.arm, writes(a))
	}
	if a := l.deliver(dl("a", 4, due), t0); a.arm != due {
		t.Fatalf("an earlier deadline re-arms: arm %d, want %d", a.arm, due)
	}
	if a := l.deliver(dl("a", 5, later+1), t0); a.arm != 0 {
		t.Fatalf("a later deadline leaves the timer: arm %d", a.arm)
	}
	l.deliver(dl("a", 6, 0), t0)
	for _, c := range []struct {
		now     int64
		requeue []uint64
		arm     int64
	}{
		{now: due - 1, arm: due}, // early: nothing dies, armed again
		{now: due, requeue: []uint64{4}, arm: later},
		{now: later + 1, requeue: []uint64{3, 5}},
	} {
		a := l.expire(c.now)
		got := l.takeOverdue()
		if a.requeue != (len(c.requeue) > 0) || !slices.Equal(got, g0(c.requeue...)) || a.arm != c.arm || len(a.writes) != 0 {
			t.Fatalf("expire at %+d: requeue %v (kick %v) arm %d, want %v arm %d", c.now-t0, got, a.requeue, a.arm, c.requeue, c.arm)
		}
	}
	// Log tag 6 (no deadline) is still held: an ack writes it.
	if _, _, a, _ := l.ack(ack(1, false), false, later+2); !slices.Equal(writes(a), [][2]uint64{{3, 6}}) {
		t.Fatalf("after the expiry an ack wrote %v, want log tag 6 as wire 3", writes(a))
	}
	// Past its deadline plus the grace on arrival: withheld, not written.
	late := dl("a", 7, later)
	if a := l.deliver(late, later+overdueGrace.Milliseconds()+1); len(a.writes) != 0 || !a.requeue || !slices.Equal(l.takeOverdue(), g0(7)) {
		t.Fatalf("overdue delivery: writes %v requeue %v", writes(a), a.requeue)
	}
	// Within the grace it is written (a follower's apply lag).
	l.ack(ack(0, true), false, later)
	if a := l.deliver(dl("a", 8, later), later+overdueGrace.Milliseconds()); len(a.writes) != 1 {
		t.Fatalf("a delivery within the grace was not written: %v", writes(a))
	}
	// A no-ack delivery is settled already: written whatever its age.
	na := dl("b", 9, t0)
	na.NoAck = true
	if a := l.deliver(na, later); len(a.writes) != 1 {
		t.Fatal("a late no-ack delivery was not written")
	}
}

// A held delivery whose deadline passed while it waited is withheld when
// an ack would have written it, and the next one is written instead.
func TestLedger_RefillSkipsTheDead(t *testing.T) {
	l := started(t, nil, []string{"a"})
	feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, t0+10), dl("a", 4, 0))
	_, _, a, _ := l.ack(ack(1, false), false, t0+10)
	if !slices.Equal(writes(a), [][2]uint64{{3, 4}}) || !a.requeue || !slices.Equal(l.takeOverdue(), g0(3)) {
		t.Fatalf("writes %v requeue %v", writes(a), a.requeue)
	}
}

// basic.recover names what the channel was assigned, written or held; the
// client's old tags are gone, and a delivery after it is new.
func TestLedger_Recover(t *testing.T) {
	l := started(t, []string{"b"}, []string{"a"})
	feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0), dl("b", 4, 0))
	if _, _, _, e := l.ack(ack(2, false), false, t0); e != nil {
		t.Fatal(e)
	}
	if got := l.recover(); !slices.Equal(got, g0(1, 3, 4)) {
		// Log tag 3 was written as wire 4 on the ack, then recovered.
		t.Fatalf("recover names %v, want 1, 3, 4", got)
	}
	if got := l.recover(); len(got) != 0 {
		t.Fatalf("a second recover names %v", got)
	}
	if _, _, _, e := l.ack(ack(1, false), false, t0); e == nil {
		t.Fatal("a recovered wire tag is still known")
	}
	// The window is empty again: the next two are written, with new tags.
	if got := feed(l, t0, dl("a", 5, 0), dl("a", 6, 0), dl("a", 7, 0)); !slices.Equal(got, [][2]uint64{{5, 5}, {6, 6}}) {
		t.Fatalf("after recover: written %v", got)
	}
}

// Closing hands everything over: what was held or withheld goes back
// unseen, after the cancels of the channel's consumers; what the client
// held is left to the close (flagged redelivered). A channel closed by its
// connection's end, the client's close or the node's own NodeDown then
// writes nothing the log assigns, and a cancel from the log is no news.
func TestLedger_Close(t *testing.T) {
	for _, c := range []struct {
		name        string
		deliveries  []*fsm.Delivery
		acks        []wire.Method
		cancels     []string
		unseen      []uint64
		redelivered []uint64
	}{
		{
			name:       "nothing held",
			deliveries: []*fsm.Delivery{dl("a", 1, 0), dl("b", 2, 0)},
			// No unseen requeue, so no cancels: ChannelClosed does it all.
			redelivered: []uint64{1, 2},
		},
		{
			name:        "held and written",
			deliveries:  []*fsm.Delivery{dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0), dl("b", 4, 0), dl("a", 5, 0)},
			acks:        []wire.Method{ack(1, false)},
			cancels:     []string{"a", "b"},
			unseen:      []uint64{5},
			redelivered: []uint64{2, 3, 4},
		},
		{
			name:        "withheld not yet requeued",
			deliveries:  []*fsm.Delivery{dl("b", 1, t0-5000), dl("b", 2, 0)},
			cancels:     []string{"a", "b"},
			unseen:      []uint64{1},
			redelivered: []uint64{2},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := started(t, []string{"b"}, []string{"a"})
			feed(l, t0, c.deliveries...)
			for _, m := range c.acks {
				if _, _, _, e := l.ack(m, false, t0); e != nil {
					t.Fatal(e)
				}
			}
			out := l.close()
			if !slices.Equal(out.cancels, c.cancels) || !slices.Equal(out.unseen, g0(c.unseen...)) || !slices.Equal(out.redelivered, g0(c.redelivered...)) {
				t.Fatalf("close %+v, want cancels %v unseen %v redelivered %v", out, c.cancels, c.unseen, c.redelivered)
			}
			// Closed: the log's late assignments are not written (the
			// close in the log covers them), nothing is held or armed.
			if a := l.deliver(dl("a", 100, t0+10), t0); len(a.writes)+len(l.takeOverdue()) != 0 || a.arm != 0 {
				t.Fatalf("a closed ledger took a delivery: %+v", a)
			}
			if known, _ := l.cancelled("a"); known {
				t.Fatal("a closed ledger reports a cancel")
			}
			if a := l.expire(t0 + 60_000); len(l.takeOverdue()) != 0 || a.arm != 0 {
				t.Fatal("a closed ledger expired something")
			}
			if again := l.close(); len(again.unseen)+len(again.redelivered)+len(again.cancels) != 0 {
				t.Fatalf("a second close gave %+v", again)
			}
		})
	}
}

// consume-ok precedes every delivery of its consumer: what the log
// assigns before it waits, and is written (or held) once it is out; a
// consumer the log cancelled meanwhile, or never registered, gets nothing.
func TestLedger_ConsumeStart(t *testing.T) {
	l := newLedger()
	if !l.startConsume("a", 2, 3) || l.startConsume("a", 2, 3) {
		t.Fatal("a starting tag must be refused a second time")
	}
	if got := feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0)); len(got) != 0 {
		t.Fatalf("written before consume-ok: %v", got)
	}
	active, a := l.consumed("a", true)
	if !active || !slices.Equal(writes(a), [][2]uint64{{1, 1}, {2, 2}}) {
		t.Fatalf("consume-ok: active %v writes %v, want 1 and 2 written, 3 held", active, writes(a))
	}
	if l.startConsume("a", 2, 3) {
		t.Fatal("an active tag was accepted again")
	}
	// Cancelled by the log before consume-ok.
	l.startConsume("b", 0, 0)
	if known, _ := l.cancelled("b"); !known {
		t.Fatal("a starting consumer's cancel is news")
	}
	if active, _ := l.consumed("b", true); active {
		t.Fatal("a consumer the log cancelled is active")
	}
	// Refused by the log: the tag is free again.
	l.startConsume("c", 2, 3)
	if active, _ := l.consumed("c", false); active || !l.startConsume("c", 2, 3) {
		t.Fatal("a refused consumer kept its tag")
	}
	// The client's cancel gives back what was held; written stays ackable.
	if got := l.cancel("a"); !slices.Equal(got, g0(3)) {
		t.Fatalf("cancel gave back %v, want held log tag 3", got)
	}
	if tags, _, _, e := l.ack(ack(2, true), false, t0); e != nil || !slices.Equal(tags, g0(1, 2)) {
		t.Fatalf("ack after cancel: %v %v", tags, e)
	}
	// The log's cancel of a consumer with held deliveries withholds them.
	l2 := started(t, nil, []string{"a"})
	feed(l2, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0))
	if known, a := l2.cancelled("a"); !known || !a.requeue || !slices.Equal(l2.takeOverdue(), g0(3)) {
		t.Fatalf("log cancel: known %v requeue %v", known, a.requeue)
	}
}

// A failed unseen requeue is sent again, ahead of what was withheld since.
func TestLedger_RequeueFailedKeepsOrder(t *testing.T) {
	l := started(t, []string{"b"}, nil)
	feed(l, t0, dl("b", 1, t0-5000))
	tags := l.takeOverdue()
	feed(l, t0, dl("b", 2, t0-5000))
	l.requeueFailed(tags)
	if got := l.takeOverdue(); !slices.Equal(got, g0(1, 2)) {
		t.Fatalf("overdue %v, want 1 then 2", got)
	}
}

// basic.get numbers its message like a delivery; a no-ack one takes a
// wire tag but nothing to acknowledge.
func TestLedger_Get(t *testing.T) {
	l := newLedger()
	if w := l.got(0, 40, true); w != 1 {
		t.Fatalf("wire tag %d", w)
	}
	if w := l.got(0, 41, false); w != 2 {
		t.Fatalf("wire tag %d", w)
	}
	if _, _, _, e := l.ack(ack(1, false), false, t0); e == nil {
		t.Fatal("a no-ack get is acknowledgeable")
	}
	if tags, _, _, e := l.ack(ack(2, false), false, t0); e != nil || !slices.Equal(tags, g0(41)) {
		t.Fatalf("ack of the get: %v %v", tags, e)
	}
}

func TestLedger_ReplyConsumer(t *testing.T) {
	l := started(t, []string{"plain"}, nil)
	if !l.tagInUse("plain") || l.tagInUse("rpc") {
		t.Fatal("tagInUse")
	}
	if _, ok := l.replyConsumer("key"); ok || l.replyName() != "" {
		t.Fatal("a reply consumer before any")
	}
	l.setReply(&replyConsumer{tag: "rpc", name: "amq.rabbitmq.reply-to.name", key: "key"})
	if tag, ok := l.replyConsumer("key"); !ok || tag != "rpc" {
		t.Fatalf("reply consumer %q %v", tag, ok)
	}
	for _, forged := range []string{"", "kex", "key2", "KEY"} {
		if _, ok := l.replyConsumer(forged); ok {
			t.Fatalf("key %q taken", forged)
		}
	}
	// Replies take wire tags in turn with deliveries, and are not the
	// client's to acknowledge.
	a := l.deliver(dl("plain", 7, 0), t0)
	r := l.replyTag()
	if len(a.writes) != 1 || a.writes[0].wire != 1 || r != 2 {
		t.Fatalf("delivery %+v, reply tag %d", a.writes, r)
	}
	if _, _, _, e := l.ack(&wire.BasicAck{DeliveryTag: r}, false, t0); e == nil {
		t.Fatal("a reply's tag was acknowledged")
	}
	if l.cancelReply("plain") || !l.cancelReply("rpc") || l.replyName() != "" {
		t.Fatal("cancelReply")
	}
	l.setReply(&replyConsumer{tag: "rpc", name: "n", key: "key"})
	l.close()
	if _, ok := l.replyConsumer("key"); ok {
		t.Fatal("a closed ledger takes replies")
	}
}

// Once the client asked to cancel a consumer, what the ledger holds for
// it is no longer written: the rejects a client tearing down sends (pika
// rejects, requeueing, what it gets meanwhile) free places that used to
// be filled from the look-ahead, so each reject wrote one more message
// for the client to reject. What is held, and what the log assigns
// meanwhile, goes back unseen with the cancel; a Cancel that failed
// writes again. After the cancel, a delivery for the consumer is
// withheld for an unseen requeue, not written; a no-ack one is written.
func TestLedger_CancellingWritesNothingMore(t *testing.T) {
	l := started(t, nil, []string{"a"})
	if got := feed(l, t0, dl("a", 1, 0), dl("a", 2, 0), dl("a", 3, 0)); !slices.Equal(got, [][2]uint64{{1, 1}, {2, 2}}) {
		t.Fatalf("written %v", got)
	}
	l.cancelling("a")
	_, _, a, e := l.ack(&wire.BasicReject{DeliveryTag: 1, Requeue: true}, false, t0)
	if e != nil || len(a.writes) != 0 {
		t.Fatalf("a reject while cancelling wrote %v (%v)", writes(a), e)
	}
	if got := feed(l, t0, dl("a", 4, 0)); len(got) != 0 {
		t.Fatalf("a delivery while cancelling was written: %v", got)
	}
	var back actions
	l.notCancelling(&back, "a", t0)
	if got := writes(back); !slices.Equal(got, [][2]uint64{{3, 3}}) {
		t.Fatalf("a failed cancel wrote %v, want the held log tag 3", got)
	}
	l.cancelling("a")
	if held := l.cancel("a"); !slices.Equal(held, g0(4)) {
		t.Fatalf("the cancel hands back %v, want log tag 4", held)
	}
	a = l.deliver(dl("a", 5, 0), t0)
	if len(a.writes) != 0 || !a.requeue || !slices.Equal(l.takeOverdue(), g0(5)) {
		t.Fatalf("a delivery after the cancel: writes %v, requeue %v", writes(a), a.requeue)
	}
	noAck := dl("a", 6, 0)
	noAck.NoAck = true
	if got := feed(l, t0, noAck); len(got) != 1 {
		t.Fatalf("a no-ack delivery after the cancel was not written: %v", got)
	}
}

// A delivery the writer did not write, its message dead by then (guard),
// is taken back: withheld for an unseen requeue, its place in the window
// given to what is held, its wire tag no longer the client's to
// acknowledge, and at the close nobody names it seen. A tag acknowledged
// already, one numbered for another log tag, or a closed ledger gives
// nothing back.
func TestLedger_TakeBack(t *testing.T) {
	l := started(t, []string{"b"}, []string{"a"})
	if got := feed(l, t0, dl("a", 1, t0+10), dl("a", 2, 0), dl("a", 3, 0), dl("b", 4, t0+10), dl("b", 5, 0)); !slices.Equal(got, [][2]uint64{{1, 1}, {2, 2}, {3, 4}, {4, 5}}) {
		t.Fatalf("written %v", got)
	}
	if _, ok := l.takeBack(1, logRef{tag: 2}, t0+1000); ok {
		t.Fatal("took back wire tag 1 for another log tag")
	}
	a, ok := l.takeBack(1, logRef{tag: 1}, t0+1000)
	if !ok || !a.requeue || !slices.Equal(writes(a), [][2]uint64{{5, 3}}) || !slices.Equal(l.takeOverdue(), g0(1)) {
		t.Fatalf("take back of a's delivery: ok %v, writes %v, requeue %v", ok, writes(a), a.requeue)
	}
	if a, ok := l.takeBack(3, logRef{tag: 4}, t0+1000); !ok || len(a.writes) != 0 || !slices.Equal(l.takeOverdue(), g0(4)) {
		t.Fatalf("take back of b's delivery: ok %v, writes %v", ok, writes(a))
	}
	if _, ok := l.takeBack(1, logRef{tag: 1}, t0+1000); ok {
		t.Fatal("took back the same delivery twice")
	}
	if _, _, _, e := l.ack(ack(1, false), false, t0); e == nil {
		t.Fatal("a taken-back wire tag is still the client's to acknowledge")
	}
	tags, _, _, e := l.ack(ack(4, true), false, t0)
	if e != nil || !slices.Equal(tags, g0(2, 5)) {
		t.Fatalf("a multiple ack up to 4 names %v (%v), want log tags 2 and 5", tags, e)
	}
	if _, ok := l.takeBack(2, logRef{tag: 2}, t0+1000); ok {
		t.Fatal("took back an acknowledged delivery")
	}
	out := l.close()
	if !slices.Equal(out.redelivered, g0(3)) {
		t.Fatalf("close names %v seen, want only log tag 3", out.redelivered)
	}
	if _, ok := l.takeBack(5, logRef{tag: 3}, t0+1000); ok {
		t.Fatal("a closed ledger took a delivery back")
	}
}

// A basic.qos gives the channel's consumers that acknowledge its new
// prefetch at once: a window writes what it held up to it and keeps its
// look-ahead at the new prefetch, a consumer without one is only told to
// the log, and neither an unchanged consumer nor one that acknowledges
// nothing (no prefetch recorded) is named.
func TestLedger_QosChangesTheRunningConsumersPrefetch(t *testing.T) {
	l := started(t, []string{"plain", "noack"}, []string{"win"})
	l.acking("plain", 1)
	l.acking("win", 2)
	var ds []*fsm.Delivery
	for i := range uint64(5) {
		ds = append(ds, dl("win", i+1, 0))
	}
	if got := feed(l, t0, ds...); len(got) != 2 {
		t.Fatalf("wrote %v before the qos, want the window's prefetch 2", got)
	}
	var a actions
	changes := l.setPrefetch(&a, 4, 3, t0)
	want := []prefetchChange{{consumer: "plain", prefetch: 4, credit: 4}, {consumer: "win", prefetch: 4, credit: consumerCredit(4, false, 3)}}
	if !slices.Equal(changes, want) {
		t.Fatalf("changes %+v, want %+v", changes, want)
	}
	if got := writes(a); len(got) != 2 || got[0] != [2]uint64{3, 3} || got[1] != [2]uint64{4, 4} {
		t.Fatalf("the raise wrote %v, want log tags 3 and 4 as wire tags 3 and 4", got)
	}
	if changes := l.setPrefetch(&a, 4, 3, t0); len(changes) != 0 {
		t.Fatalf("the same prefetch again changed %+v", changes)
	}
	a = actions{}
	if changes := l.setPrefetch(&a, 0, 3, t0); len(changes) != 2 || writes(a)[0] != [2]uint64{5, 5} {
		t.Fatalf("lifting the prefetch changed %+v and wrote %v, want both consumers and log tag 5", changes, writes(a))
	}
}
