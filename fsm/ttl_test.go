package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func deathOf(t *testing.T, p *proto.Properties) map[string]*proto.Value {
	t.Helper()
	v, ok := tableLookup(p.GetHeaders(), "x-death")
	if !ok || len(v.GetArray().GetValues()) == 0 {
		t.Fatalf("no x-death in %v", p)
	}
	out := map[string]*proto.Value{}
	for _, f := range v.GetArray().GetValues()[0].GetTable().GetFields() {
		out[f.GetKey()] = f.GetValue()
	}
	return out
}

// seeds/000: "The server guarantees that dead messages will not be included
// in any basic.get-ok or basic.deliver methods."
func TestMachine_DeadMessageNeverReturned(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-message-ttl", i64(100))))
	fsmtest.One(t, m, 1000, publish("", "q", "x", nil))
	if r, _ := fsmtest.One(t, m, 1100, get("q", true)); r.GetGet() != nil {
		t.Fatal("get returned a message at its deadline")
	}
	fsmtest.One(t, m, 1200, publish("", "q", "y", nil))
	_, rec := fsmtest.One(t, m, 1300, consume("q", "c", ch1, 0))
	if len(rec.Deliveries) != 0 {
		t.Fatal("consumer got a dead message")
	}
	if st := m.Stats(); st.Expired != 2 || st.Ready != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// seeds/000: "When both a per-queue and a per-message TTL are specified, the
// lower value between the two will be chosen."
func TestMachine_LowerOfQueueAndMessageTTL(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-message-ttl", i64(500))))
	fsmtest.Apply(t, m, 1000, publish("", "q", "long", expiring("5000")), publish("", "q", "short", expiring("100")))
	if d, ok := m.NextDeadline(); !ok || d != 1100 {
		t.Fatalf("next deadline %d %v", d, ok)
	}
	if due := m.DueExpiries(1100); len(due) != 1 || due[0].GetName() != "q" {
		t.Fatalf("due %v", due)
	}
	// Expire removes the due message even though it is not at the head.
	fsmtest.One(t, m, 1100, expire("q"))
	if got := ready(t, m, "q"); got != 1 {
		t.Fatalf("%d ready after the first expiry", got)
	}
	fsmtest.One(t, m, 1500, expire("q"))
	if got := ready(t, m, "q"); got != 0 {
		t.Fatalf("%d ready after the queue TTL", got)
	}
}

// seeds/000: "Setting the TTL to 0 causes messages to be expired upon
// reaching a queue unless they can be delivered to a consumer immediately.
// ... no basic.returns are issued, and if a dead letter exchange is set then
// messages will be dead-lettered."
func TestMachine_TTLZero(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000,
		declare("dl", nil),
		declare("q", table("x-message-ttl", i64(0), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl"))))
	r, _ := fsmtest.One(t, m, 1000, publish("", "q", "nobody", nil))
	if !r.GetRouted() || ready(t, m, "q") != 0 || ready(t, m, "dl") != 1 {
		t.Fatalf("TTL 0 without consumer: routed %v q %d dl %d", r.GetRouted(), ready(t, m, "q"), ready(t, m, "dl"))
	}
	fsmtest.One(t, m, 1001, consume("q", "c", ch1, 1))
	_, rec := fsmtest.One(t, m, 1002, publish("", "q", "taken", nil))
	if len(rec.Deliveries) != 1 || string(rec.Deliveries[0].Body) != "taken" {
		t.Fatal("TTL 0 message not delivered to a consumer with credit")
	}
	_, rec = fsmtest.One(t, m, 1003, publish("", "q", "nocredit", nil))
	if len(rec.Deliveries) != 0 || ready(t, m, "dl") != 2 {
		t.Fatal("TTL 0 message without credit not dead-lettered")
	}
	g, _ := fsmtest.One(t, m, 1004, get("dl", true))
	d := deathOf(t, g.GetGet().GetProperties())
	if string(d["reason"].GetLongString()) != "expired" || string(d["queue"].GetLongString()) != "q" || d["count"].GetInt64() != 1 || d["time"].GetTimestamp() != 1 {
		t.Fatalf("x-death %v", d)
	}
	if v, ok := tableLookup(g.GetGet().GetProperties().GetHeaders(), "x-first-death-reason"); !ok || string(v.GetLongString()) != "expired" {
		t.Fatal("x-first-death-reason")
	}
}

// seeds/000: "The original expiry time of a message is preserved if it is
// requeued (for example due to the use of an AMQP method that features a
// requeue parameter, or due to a channel closure)."
func TestMachine_RequeueKeepsDeadline(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("dl", nil),
		declare("q", table("x-message-ttl", i64(1000), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl"))))
	fsmtest.Apply(t, m, 1000, publish("", "q", "a", nil), publish("", "q", "b", nil))
	fsmtest.One(t, m, 1500, publish("", "q", "c", nil))
	fsmtest.Apply(t, m, 1600, get("q", false), get("q", false), get("q", false))
	// At 2000 a and b are overdue: requeued, they die at once.
	fsmtest.One(t, m, 2000, requeue(ch1, 3, true))
	if ready(t, m, "q") != 1 || ready(t, m, "dl") != 2 {
		t.Fatalf("q %d dl %d", ready(t, m, "q"), ready(t, m, "dl"))
	}
	if d, _ := m.NextDeadline(); d != 2500 {
		t.Fatalf("requeued message deadline %d, want the original 2500", d)
	}
	r, _ := fsmtest.One(t, m, 2100, get("q", true))
	if !r.GetGet().GetRedelivered() || string(r.GetGet().GetBody()) != "c" {
		t.Fatal("requeued message not redelivered")
	}
}

// seeds/000: "This controls for how long a queue can be unused before it is
// automatically deleted. Unused means the queue has no consumers, the queue
// has not been redeclared, and basic.get has not been invoked for a duration
// of at least the expiration period."
func TestMachine_QueueLease(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-expires", i64(1000))))
	if d, ok := m.NextLeaseDue(); !ok || d != 2000 {
		t.Fatalf("lease %d", d)
	}
	fsmtest.One(t, m, 1500, declare("q", table("x-expires", i64(1000)))) // renews
	fsmtest.One(t, m, 2000, &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: &proto.QueueRef{Vhost: "/", Name: "q"}}}})
	if _, ok := m.Queue("/", "q"); !ok {
		t.Fatal("redeclared queue deleted early")
	}
	fsmtest.One(t, m, 2400, consume("q", "c", ch1, 0))
	if due := m.DueLeases(10000); len(due) != 0 {
		t.Fatal("queue with consumer listed as due")
	}
	fsmtest.One(t, m, 2600, cancel("c", ch1))
	if due := m.DueLeases(3600); len(due) != 1 {
		t.Fatalf("lease not due after cancel+expires: %v", due)
	}
	fsmtest.One(t, m, 1000, publish("", "q", "x", nil))
	fsmtest.One(t, m, 3600, &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: &proto.QueueRef{Vhost: "/", Name: "q"}}}})
	if _, ok := m.Queue("/", "q"); ok {
		t.Fatal("unused queue kept")
	}
}

// seeds/000: "Leases of durable queues restart when the server restarts."
// RestartLeases, proposed after the whole cluster was down, restarts every
// lease at its stamp; a queue whose lease ran out while the cluster was
// down lives for its whole period again.
func TestMachine_RestartLeases(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("a", table("x-expires", i64(1000))))
	fsmtest.One(t, m, 1000, declare("b", table("x-expires", i64(5000))))
	fsmtest.One(t, m, 9000, &proto.Command{Cmd: &proto.Command_RestartLeases{RestartLeases: &proto.RestartLeases{}}})
	if d, ok := m.NextLeaseDue(); !ok || d != 10000 {
		t.Fatalf("next lease due %d, %v; want 10000 (restarted at 9000 with 1000)", d, ok)
	}
	if due := m.DueLeases(9999); len(due) != 0 {
		t.Fatalf("leases due before their restarted period: %v", due)
	}
	if due := m.DueLeases(14000); len(due) != 2 {
		t.Fatalf("leases due at 14000: %v, want both", due)
	}
}

// seeds/000: "TTL can be set for a given queue by setting the x-message-ttl
// argument to queue.declare, or by setting the message-ttl policy."
// The lower of argument and policy wins, operator policies cap, and a policy
// change recomputes the deadlines of queued messages.
func TestMachine_PolicyTTLRetroactive(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-message-ttl", i64(10000))))
	fsmtest.One(t, m, 1000, publish("", "q", "x", nil))
	fsmtest.One(t, m, 1100, policySet("p", "^q$", 0, false, &proto.PolicyDefinition{MessageTtl: ptr(int64(5000))}))
	if d, _ := m.NextDeadline(); d != 6000 {
		t.Fatalf("deadline %d after policy, want 6000", d)
	}
	fsmtest.One(t, m, 1200, policySet("op", ".*", 0, true, &proto.PolicyDefinition{MessageTtl: ptr(int64(300))}))
	if d, _ := m.NextDeadline(); d != 1300 {
		t.Fatalf("deadline %d after operator policy, want 1300", d)
	}
	qi, _ := m.Queue("/", "q")
	if qi.GetEffectiveMessageTtl() != 300 || qi.GetOperatorPolicy() != "op" || qi.GetPolicy() != "p" {
		t.Fatalf("queue info %v", qi)
	}
	fsmtest.One(t, m, 1250, &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{Vhost: "/", Name: "op", Operator: true}}})
	if d, _ := m.NextDeadline(); d != 6000 {
		t.Fatalf("deadline %d after clear", d)
	}
	roundTrip(t, m)
}

func TestMachine_MaxLength(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("dl", nil),
		declare("drop", table("x-max-length", i64(2), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl"))),
		declare("rej", table("x-max-length", i64(1), "x-overflow", str("reject-publish"))))
	for _, b := range []string{"1", "2", "3"} {
		fsmtest.One(t, m, 1001, publish("", "drop", b, nil))
	}
	if ready(t, m, "drop") != 2 || ready(t, m, "dl") != 1 {
		t.Fatal("drop-head")
	}
	g, _ := fsmtest.One(t, m, 1002, get("dl", true))
	if d := deathOf(t, g.GetGet().GetProperties()); string(d["reason"].GetLongString()) != "maxlen" || string(g.GetGet().GetBody()) != "1" {
		t.Fatalf("maxlen death %v", d)
	}
	fsmtest.One(t, m, 1003, publish("", "rej", "a", nil))
	if r, _ := fsmtest.One(t, m, 1003, publish("", "rej", "b", nil)); !r.GetRejected() || ready(t, m, "rej") != 1 {
		t.Fatal("reject-publish")
	}
	fsmtest.One(t, m, 1004, policySet("ml", "^drop$", 0, false, &proto.PolicyDefinition{MaxLength: ptr(int64(1))}))
	if ready(t, m, "drop") != 1 {
		t.Fatal("policy max-length not enforced at once")
	}
}

// Dead-lettering cycles: a message that expires back into its own queue is
// dropped; a rejected one is not.
func TestMachine_DeadLetterCycle(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-message-ttl", i64(10), "x-dead-letter-exchange", str(""))))
	fsmtest.One(t, m, 1000, publish("", "q", "x", nil))
	fsmtest.One(t, m, 1010, expire("q"))
	if ready(t, m, "q") != 0 {
		t.Fatal("expired cycle not dropped")
	}
	fsmtest.One(t, m, 1020, publish("", "q", "y", nil))
	fsmtest.One(t, m, 1021, get("q", false))
	fsmtest.One(t, m, 1022, discard(ch1, 1, false))
	if ready(t, m, "q") != 1 {
		t.Fatal("rejected message not dead-lettered back")
	}
}

// Stats counts as overdue the ready messages whose deadline has passed,
// in queues with a TTL, and none while every deadline is ahead.
func TestStats_OverdueCountsPassedDeadlines(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("ttl", table("x-message-ttl", i64(1000))))
	fsmtest.One(t, m, 2, declare("plain", nil))
	for i := 0; i < 3; i++ {
		fsmtest.One(t, m, 3, publish("", "ttl", "x", nil))
		fsmtest.One(t, m, 3, publish("", "plain", "x", nil))
	}
	if st := m.Stats(); st.Ready != 6 || st.Overdue != 0 {
		t.Fatalf("before the deadline: ready %d overdue %d", st.Ready, st.Overdue)
	}
	fsmtest.One(t, m, 5000, publish("", "plain", "x", nil))
	if st := m.Stats(); st.Ready != 7 || st.Overdue != 3 {
		t.Fatalf("after the deadline: ready %d overdue %d, want 7 and 3", st.Ready, st.Overdue)
	}
}
