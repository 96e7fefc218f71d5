package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// RabbitMQ classic queues put requeued messages back at the head in tag
// order, ahead of messages that were never delivered.
func TestMachine_RequeueOrder(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	for _, b := range []string{"a", "b", "c", "d"} {
		fsmtest.One(t, m, 2, publish("", "q", b, nil))
	}
	fsmtest.Apply(t, m, 3, get("q", false), get("q", false), get("q", false))
	fsmtest.One(t, m, 4, requeue(ch1, 0, true))
	var got string
	for i := 0; i < 4; i++ {
		r, _ := fsmtest.One(t, m, 5, get("q", true))
		got += string(r.GetGet().GetBody())
	}
	if got != "abcd" {
		t.Fatalf("order after requeue %q", got)
	}
}

func TestMachine_Topology(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 2, declare("q", nil), exchangeDeclare("h", "headers", nil), exchangeDeclare("e", "direct", nil),
		bind("h", "q", "", false, table("x-match", str("all"), "a", str("1"), "b", str("2"))), bind("e", "q", "k", false, nil))
	if r, _ := fsmtest.One(t, m, 3, publish("h", "", "x", &proto.Properties{Headers: table("a", str("1"))})); r.GetRouted() {
		t.Fatal("x-match all routed with one header of two")
	}
	if r, _ := fsmtest.One(t, m, 3, publish("h", "", "x", &proto.Properties{Headers: table("a", str("1"), "b", str("2"))})); !r.GetRouted() {
		t.Fatal("x-match all not routed")
	}
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "e", IfUnused: true}}}); r.GetCode() != 406 {
		t.Fatalf("if-unused delete of a bound exchange: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_Unbind{Unbind: &proto.Unbind{Vhost: "/", Source: "e", Destination: "q", RoutingKey: "missing"}}}); r.GetCode() != 0 {
		t.Fatalf("unbind of a missing binding: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_QueuePurge{QueuePurge: &proto.QueuePurge{Vhost: "/", Name: "q"}}}); r.GetMessageCount() != 1 {
		t.Fatalf("purge: %v", r)
	}
	fsmtest.One(t, m, 5, consume("q", "c", ch1, 0))
	r, rec := fsmtest.One(t, m, 6, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}})
	if r.GetCode() != 0 || len(rec.Cancelled) != 1 || len(m.Bindings("/")) != 0 {
		t.Fatalf("delete under a consumer: %v, %d cancels, %d bindings", r, len(rec.Cancelled), len(m.Bindings("/")))
	}
	if r, _ := fsmtest.One(t, m, 7, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "amq.direct"}}}); r.GetCode() != 403 || r.GetText() != "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed" {
		t.Fatalf("delete of a system exchange: %v", r)
	}
}

// seeds/001: "Expired messages (both from message TTL and queue overflow)
// can be dead-lettered if a dead letter exchange is configured." Expire at T
// kills every due message wherever it sits, in deadline order.
func TestMachine_ExpireDeadlineOrder(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000, declare("dl", nil),
		declare("q", table("x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl"))))
	fsmtest.Apply(t, m, 1000,
		publish("", "q", "keep", nil),
		publish("", "q", "late", expiring("300")),
		publish("", "q", "early", expiring("100")),
		publish("", "q", "mid", expiring("200")))
	fsmtest.One(t, m, 1300, expire("q"))
	var got string
	for i := 0; i < 3; i++ {
		r, _ := fsmtest.One(t, m, 1301, get("dl", true))
		got += string(r.GetGet().GetBody()) + " "
		if e := r.GetGet().GetProperties().Expiration; e != nil {
			t.Fatal("expiration kept on a dead-lettered message")
		}
	}
	if got != "early mid late " || ready(t, m, "q") != 1 {
		t.Fatalf("dead-letter order %q, %d left", got, ready(t, m, "q"))
	}
}

// x-death records the original routing keys (CC and BCC included) and the
// original expiration; the dead-lettered copy keeps CC but never BCC.
func TestMachine_DeathRecord(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 5000, declare("dl", nil), declare("q", table("x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl"))))
	props := expiring("100")
	props.Headers = table("CC", str("nowhere"), "BCC", str("hidden"))
	fsmtest.One(t, m, 5000, publish("", "q", "x", props))
	fsmtest.One(t, m, 6000, expire("q"))
	r, _ := fsmtest.One(t, m, 6000, get("dl", true))
	d := deathOf(t, r.GetGet().GetProperties())
	var keys []string
	for _, v := range d["routing-keys"].GetArray().GetValues() {
		keys = append(keys, string(v.GetLongString()))
	}
	if len(keys) != 3 || keys[0] != "q" || keys[1] != "nowhere" || keys[2] != "hidden" {
		t.Fatalf("routing-keys %v", keys)
	}
	if string(d["original-expiration"].GetLongString()) != "100" || d["time"].GetTimestamp() != 6 {
		t.Fatalf("x-death %v", d)
	}
	if _, ok := tableLookup(r.GetGet().GetProperties().GetHeaders(), "BCC"); ok {
		t.Fatal("BCC kept")
	}
	if r.GetGet().GetRoutingKey() != "dl" || r.GetGet().GetExchange() != "" {
		t.Fatalf("dead-lettered routing %q %q", r.GetGet().GetExchange(), r.GetGet().GetRoutingKey())
	}
}

// seeds/000: "The value of the x-expires argument or expires policy
// describes the expiration period in milliseconds." The lower of argument
// and policy wins and a policy change moves the lease at once.
func TestMachine_PolicyExpiresMovesLease(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 1000, declare("q", table("x-expires", i64(100000))))
	fsmtest.One(t, m, 1000, policySet("e", "^q$", 0, false, &proto.PolicyDefinition{Expires: ptr(int64(500))}))
	if d, ok := m.NextLeaseDue(); !ok || d != 1500 {
		t.Fatalf("lease %d %v", d, ok)
	}
	if r, _ := fsmtest.One(t, m, 1000, policySet("bad", ".*", 0, false, &proto.PolicyDefinition{Expires: ptr(int64(0))})); r.GetCode() != 406 {
		t.Fatalf("expires 0 policy: %v", r)
	}
	if len(m.Policies("/", false)) != 1 {
		t.Fatal("refused policy stored")
	}
}

func TestMachine_ConnectionClosed(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 2, declare("shared", nil),
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "mine", Exclusive: true, Connection: conn1}}},
		publish("", "shared", "a", nil), publish("", "shared", "b", nil))
	_, rec := fsmtest.One(t, m, 3, consume("shared", "c", ch1, 0))
	if len(rec.Deliveries) != 2 {
		t.Fatal("no deliveries")
	}
	ch1b := &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 2}
	fsmtest.One(t, m, 3, consume("shared", "c", ch1b, 0))
	_, rec = fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{Connection: conn1}}})
	if _, ok := m.Queue("/", "mine"); ok {
		t.Fatal("exclusive queue survived its connection")
	}
	qi, _ := m.Queue("/", "shared")
	if qi.GetReady() != 2 || qi.GetConsumers() != 0 || qi.GetUnacked() != 0 || len(rec.Cancelled) != 0 {
		t.Fatalf("after connection close: %v, %d cancels", qi, len(rec.Cancelled))
	}
}

func TestMachine_OverflowModes(t *testing.T) {
	cases := []struct {
		name      string
		args      *proto.Table
		rejected  bool
		ready, dl uint64
	}{
		{"drop-head bytes", table("x-max-length-bytes", i64(4), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl")), false, 2, 1},
		{"reject-publish", table("x-max-length", i64(2), "x-overflow", str("reject-publish"), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl")), true, 2, 0},
		{"reject-publish-dlx", table("x-max-length", i64(2), "x-overflow", str("reject-publish-dlx"), "x-dead-letter-exchange", str(""), "x-dead-letter-routing-key", str("dl")), true, 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := fsmtest.New(t)
			fsmtest.Apply(t, m, 2, declare("dl", nil), declare("q", c.args))
			fsmtest.Apply(t, m, 3, publish("", "q", "aa", nil), publish("", "q", "bb", nil))
			r, _ := fsmtest.One(t, m, 4, publish("", "q", "cc", nil))
			if r.GetRejected() != c.rejected || ready(t, m, "q") != c.ready || ready(t, m, "dl") != c.dl {
				t.Fatalf("rejected %v ready %d dl %d", r.GetRejected(), ready(t, m, "q"), ready(t, m, "dl"))
			}
		})
	}
}

func TestMachine_AutoDeleteExchange(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 2, declare("q", nil),
		&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "ad", Type: "fanout", AutoDelete: true}}},
		bind("ad", "q", "", false, nil))
	fsmtest.One(t, m, 3, &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: "q"}}})
	for _, x := range m.Exchanges("/") {
		if x.GetName() == "ad" {
			t.Fatal("auto-delete exchange kept after its last binding went")
		}
	}
}

// A consumer's credit above its prefetch lets the state machine assign that
// many deliveries before acks; an unseen requeue of some of them leaves the
// redelivered flag off, and the credit survives a snapshot.
func TestMachine_CreditAndUnseenRequeue(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	for i := 0; i < 8; i++ {
		fsmtest.One(t, m, 3, publish("", "q", string(rune('a'+i)), nil))
	}
	c := consume("q", "c1", ch1, 2)
	c.GetConsume().Credit = 5
	_, rec := fsmtest.Apply(t, m, 4, c)
	if len(rec.Deliveries) != 5 {
		t.Fatalf("credit 5, prefetch 2: %d assigned", len(rec.Deliveries))
	}
	// The listing counts what the client holds: the 3 beyond the prefetch
	// count as ready (queue_counts.go).
	if cs := m.Consumers("/"); len(cs) != 1 || cs[0].Prefetch != 2 || cs[0].Unacked != 2 {
		t.Fatalf("consumer listing: %+v", cs)
	}
	m = roundTrip(t, m)

	// Tags 4 and 5 were held by the node: they go back unseen, and come
	// straight back to the consumer (its credit is free again) unflagged.
	unseen := requeue(ch1, 4, false)
	unseen.GetRequeue().Unseen = true
	_, rec = fsmtest.Apply(t, m, 5, unseen)
	if len(rec.Deliveries) != 1 || rec.Deliveries[0].Redelivered || string(rec.Deliveries[0].Body) != "d" {
		t.Fatalf("unseen requeue: %+v", rec.Deliveries)
	}
	// An ordinary requeue flags it.
	_, rec = fsmtest.Apply(t, m, 6, requeue(ch1, 5, false))
	if len(rec.Deliveries) != 1 || !rec.Deliveries[0].Redelivered || string(rec.Deliveries[0].Body) != "e" {
		t.Fatalf("requeue: %+v", rec.Deliveries)
	}
	// Acks return credit up to the credit, not the prefetch.
	_, rec = fsmtest.Apply(t, m, 7, settle(ch1, 3, true))
	if len(rec.Deliveries) != 3 {
		t.Fatalf("after acking 3 of 5: %d assigned", len(rec.Deliveries))
	}
}

// consumingAll returns a machine with n messages (a, b, ...) in queue q,
// all assigned to consumer c1 on ch1 (prefetch 0) with tags 1..n.
func consumingAll(t *testing.T, n int) *fsm.Machine {
	t.Helper()
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	for i := 0; i < n; i++ {
		fsmtest.One(t, m, 3, publish("", "q", string(rune('a'+i)), nil))
	}
	fsmtest.One(t, m, 4, consume("q", "c1", ch1, 0))
	return m
}

// Settle, Requeue and Discard with explicit tags take exactly those, or
// none when one is unknown.
func TestMachine_SettleExplicitTags(t *testing.T) {
	m := consumingAll(t, 5)
	ack := settle(ch1, 0, false)
	ack.GetSettle().Tags = []uint64{4, 2, 9}
	if r, _ := fsmtest.One(t, m, 5, ack); r.GetCode() != 406 {
		t.Fatalf("unknown tag 9 in the list: %v", r)
	}
	if st := m.Stats(); st.Unacked != 5 {
		t.Fatalf("a refused list took something: %+v", st)
	}
	ack.GetSettle().Tags = []uint64{4, 2}
	if r, _ := fsmtest.One(t, m, 6, ack); r.GetCode() != 0 {
		t.Fatalf("ack 4 and 2: %v", r)
	}
	nack := requeue(ch1, 0, false)
	nack.GetRequeue().Tags = []uint64{5, 1}
	if r, _ := fsmtest.One(t, m, 7, nack); r.GetCode() != 0 {
		t.Fatalf("requeue 5 and 1: %v", r)
	}
	// 1 and 5 come back (prefetch 0: at once) as 6 and 7, in tag order.
	rej := discard(ch1, 0, false)
	rej.GetDiscard().Tags = []uint64{3, 6, 7}
	if r, _ := fsmtest.One(t, m, 8, rej); r.GetCode() != 0 {
		t.Fatalf("discard 3, 6, 7: %v", r)
	}
	if st := m.Stats(); st.Unacked != 0 || st.Acked != 2 || st.Rejected != 3 {
		t.Fatalf("stats %+v", st)
	}
	roundTrip(t, m)
}

// Explicit tags taken from the front, from the middle and from both keep
// the rest of the channel's deliveries, in order.
func TestMachine_SettleExplicitTagsKeepsTheRest(t *testing.T) {
	m := consumingAll(t, 8)
	ackTags := func(tags ...uint64) *proto.Result {
		c := settle(ch1, 0, false)
		c.GetSettle().Tags = tags
		r, _ := fsmtest.One(t, m, 5, c)
		return r
	}
	for _, step := range []struct {
		tags []uint64
		code uint32
	}{
		{[]uint64{2, 1}, 0},    // the front
		{[]uint64{1}, 406},     // gone
		{[]uint64{5}, 0},       // the middle
		{[]uint64{3, 4, 7}, 0}, // the new front and a later one
		{[]uint64{5, 6}, 406},  // 5 is gone: nothing taken
	} {
		if r := ackTags(step.tags...); r.GetCode() != step.code {
			t.Fatalf("ack %v: got %v, want code %d", step.tags, r, step.code)
		}
	}
	// 6 and 8 remain: a multiple ack of 8 takes exactly those two.
	if st := m.Stats(); st.Unacked != 2 || st.Acked != 6 {
		t.Fatalf("before the multiple ack: %+v", st)
	}
	if r, _ := fsmtest.One(t, m, 6, settle(ch1, 8, true)); r.GetCode() != 0 {
		t.Fatalf("multiple ack of 8: %v", r)
	}
	if st := m.Stats(); st.Unacked != 0 || st.Acked != 8 {
		t.Fatalf("after: %+v", st)
	}
	roundTrip(t, m)
}
