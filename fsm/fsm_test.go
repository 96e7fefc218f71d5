package fsm_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func TestMachine_EveryCommandHandled(t *testing.T) {
	oneof := (&proto.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("cmd")
	fields := oneof.Fields()
	for i := 0; i < fields.Len(); i++ {
		f := fields.Get(i)
		t.Run(string(f.Name()), func(t *testing.T) {
			m := fsmtest.New(t)
			c := &proto.Command{}
			msg := c.ProtoReflect()
			msg.Set(f, protoreflect.ValueOfMessage(msg.NewField(f).Message()))
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s panicked: %v", f.Name(), r)
					}
				}()
				fsmtest.Apply(t, m, 10, c)
			}()
		})
	}
}

func TestMachine_UnknownCommand(t *testing.T) {
	m := fsmtest.New(t)
	res, _ := fsmtest.Apply(t, m, 5, &proto.Command{Ignorable: true})
	if res[0].GetCode() != 0 || res[0].GetIndex() != m.AppliedIndex() {
		t.Fatalf("ignorable: %v", res[0])
	}
	// A command of no kind (an earlier leader proposed whatever it was
	// sent) is refused and changes nothing, on every replica alike.
	twin := fsmtest.New(t)
	fsmtest.Apply(t, twin, 5, &proto.Command{Ignorable: true})
	res, _ = fsmtest.Apply(t, m, 6, &proto.Command{})
	fsmtest.Apply(t, twin, 6, &proto.Command{Ignorable: true})
	if res[0].GetCode() != 541 || !strings.Contains(res[0].GetText(), "no kind") {
		t.Fatalf("empty command: %v", res[0])
	}
	if m.Digest() != twin.Digest() {
		t.Fatal("an empty command changed the state")
	}
}

func TestMachine_InitializedAndReads(t *testing.T) {
	m := fsm.New()
	if m.Initialized() {
		t.Fatal("fresh machine initialized")
	}
	m = fsmtest.New(t)
	if !m.Initialized() || !m.VhostExists("/") || m.VhostExists("x") {
		t.Fatal("defaults missing")
	}
	if _, tags, ok := m.User("guest"); !ok || len(tags) != 1 {
		t.Fatal("guest missing")
	}
	fsmtest.One(t, m, 2, &proto.Command{Cmd: &proto.Command_PermissionSet{PermissionSet: &proto.PermissionSet{User: "guest", Vhost: "/", Configure: ".*", Write: ".*", Read: "r"}}})
	if c, _, r, ok := m.Permission("guest", "/"); !ok || c != ".*" || r != "r" {
		t.Fatal("permission")
	}
	if n := len(m.Exchanges("/")); n != 6 {
		t.Fatalf("%d default exchanges", n)
	}
	if len(m.Vhosts()) != 1 || len(m.Users()) != 1 || len(m.Permissions()) != 1 {
		t.Fatal("listings")
	}
	roundTrip(t, m)
}

func TestMachine_Refusals(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", table("x-message-ttl", i64(1000))))
	other := &proto.ConnectionRef{Node: "n2", Connection: "c9"}
	fsmtest.One(t, m, 2, &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ex", Exclusive: true, Connection: conn1}}})
	fsmtest.One(t, m, 2, exchangeDeclare("xa", "direct", table("alternate-exchange", str("a"))))
	if r, _ := fsmtest.One(t, m, 2, exchangeDeclare("xa", "direct", table("alternate-exchange", str("a")))); r.GetCode() != 0 {
		t.Fatalf("redeclare with the same alternate exchange: %v", r)
	}
	cases := []struct {
		name string
		cmd  *proto.Command
		code uint32
		text string
	}{
		{"passive missing", &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "nope", Passive: true}}}, 404, "no queue 'nope' in vhost '/'"},
		{"inequivalent ttl", declare("q", table("x-message-ttl", i64(2000))), 406, "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received the value '2000' of type 'long' but current is the value '1000' of type 'long'"},
		{"locked", &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ex", Connection: other}}}, 405, "cannot obtain exclusive access to locked queue 'ex' in vhost '/'"},
		{"reserved", declare("amq.q", nil), 403, "reserved prefix 'amq.*'"},
		{"bad type", exchangeDeclare("e", "bogus", nil), 503, "unknown exchange type 'bogus'"},
		{"inequivalent alternate exchange", exchangeDeclare("xa", "direct", table("alternate-exchange", str("b"))), 406,
			"inequivalent arg 'alternate-exchange' for exchange 'xa' in vhost '/': received the value 'b' of type 'longstr' but current is the value 'a' of type 'longstr'"},
		{"alternate exchange left out", exchangeDeclare("xa", "direct", nil), 406,
			"inequivalent arg 'alternate-exchange' for exchange 'xa' in vhost '/': received none but current is the value 'a' of type 'longstr'"},
		{"bad ttl", declare("t", table("x-message-ttl", i64(-1))), 406, "invalid arg 'x-message-ttl'"},
		{"bad expires", declare("t", table("x-expires", i64(0))), 406, "invalid arg 'x-expires'"},
		{"bad expiration", publish("", "q", "b", expiring("abc")), 406, "invalid expiration 'abc'"},
		{"bind default", bind("", "q", "k", false, nil), 403, "default exchange"},
		{"unknown tag", settle(ch1, 7, false), 406, "unknown delivery tag 7"},
		{"bad policy ttl", policySet("p", ".*", 0, false, &proto.PolicyDefinition{MessageTtl: ptr(int64(-1))}), 406, "not a valid message TTL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := m.Digest()
			r, _ := fsmtest.One(t, m, 3, c.cmd)
			if r.GetCode() != c.code || !strings.Contains(r.GetText(), c.text) {
				t.Fatalf("got %d %q, want %d %q", r.GetCode(), r.GetText(), c.code, c.text)
			}
			_ = before
			if _, ok := m.Queue("/", "t"); ok {
				t.Fatal("refused declare applied")
			}
		})
	}
	fsmtest.One(t, m, 4, consume("q", "tag", ch1, 0))
	if r, _ := fsmtest.One(t, m, 4, consume("q", "tag", ch1, 0)); r.GetCode() != 530 {
		t.Fatalf("reused tag: %v", r)
	}
	fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "ex", Exclusive: true, Consumer: &proto.ConsumerRef{Channel: ch1, Tag: "x1"}}}})
	if r, _ := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: "ex", Consumer: &proto.ConsumerRef{Channel: ch1, Tag: "x2"}}}}); r.GetCode() != 403 || !strings.Contains(r.GetText(), "in exclusive use") {
		t.Fatalf("second exclusive consumer: %v", r)
	}
}

func TestMachine_Routing(t *testing.T) {
	m := fsmtest.New(t)
	for _, q := range []string{"a", "b", "c", "h"} {
		fsmtest.One(t, m, 2, declare(q, nil))
	}
	fsmtest.Apply(t, m, 2,
		exchangeDeclare("t", "topic", nil),
		exchangeDeclare("f", "fanout", nil),
		exchangeDeclare("hd", "headers", nil),
		exchangeDeclare("ae", "fanout", nil),
		exchangeDeclare("withae", "direct", table("alternate-exchange", str("ae"))),
		bind("t", "a", "x.*", false, nil),
		bind("t", "b", "x.#", false, nil),
		bind("t", "f", "#", true, nil),
		bind("f", "a", "", false, nil),
		bind("f", "a", "", false, nil),
		bind("hd", "h", "", false, table("x-match", str("any"), "k", str("v"), "z", str("w"))),
		bind("ae", "c", "", false, nil),
	)
	if n := len(m.Bindings("/")); n != 6 {
		t.Fatalf("%d bindings, duplicate bind not a no-op?", n)
	}
	fsmtest.Apply(t, m, 3,
		publish("t", "x.y", "1", nil),       // a (once despite two paths), b
		publish("t", "x", "2", nil),         // b (# matches zero words), a via fanout
		publish("t", "x.y.z", "3", nil),     // b, a via fanout
		publish("withae", "none", "4", nil), // c via alternate exchange
		publish("hd", "", "5", &proto.Properties{Headers: table("k", str("v"))}),
		publish("", "q", "6", &proto.Properties{Headers: table("CC", str("b"), "BCC", str("c"))}),
	)
	want := map[string]uint64{"a": 3, "b": 4, "c": 2, "h": 1}
	for q, n := range want {
		if got := ready(t, m, q); got != n {
			t.Errorf("%s: %d ready, want %d", q, got, n)
		}
	}
	r, _ := fsmtest.One(t, m, 4, get("c", true))
	r, _ = fsmtest.One(t, m, 4, get("c", true))
	if _, ok := tableLookup(r.GetGet().GetProperties().GetHeaders(), "BCC"); ok || string(r.GetGet().GetBody()) != "6" {
		t.Fatalf("BCC delivered: %v", r.GetGet())
	}
	fsmtest.One(t, m, 4, exchangeDeclare("int", "fanout", nil))
	fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "in", Type: "fanout", Internal: true}}})
	if r, _ := fsmtest.One(t, m, 5, publish("in", "", "x", nil)); r.GetCode() != 403 {
		t.Fatalf("publish to internal: %v", r)
	}
	if r, _ := fsmtest.One(t, m, 5, publish("int", "", "x", nil)); r.GetRouted() {
		t.Fatal("unbound exchange routed")
	}
	roundTrip(t, m)
}

func tableLookup(t *proto.Table, k string) (*proto.Value, bool) {
	for _, f := range t.GetFields() {
		if f.GetKey() == k {
			return f.GetValue(), true
		}
	}
	return nil, false
}

func TestMachine_ConsumeSettleRequeue(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.One(t, m, 2, declare("q", nil))
	for i := 0; i < 4; i++ {
		fsmtest.One(t, m, 3, publish("", "q", string(rune('a'+i)), nil))
	}
	_, rec := fsmtest.Apply(t, m, 4, consume("q", "c1", ch1, 1), consume("q", "c2", ch2, 1))
	if len(rec.Deliveries) != 2 || string(rec.Deliveries[0].Body) != "a" || string(rec.Deliveries[1].Body) != "b" || rec.Deliveries[1].Consumer.GetTag() != "c2" {
		t.Fatalf("round robin with prefetch: %+v", rec.Deliveries)
	}
	// Ack frees credit: the next message goes to c1.
	_, rec = fsmtest.Apply(t, m, 5, settle(ch1, 1, false))
	if len(rec.Deliveries) != 1 || string(rec.Deliveries[0].Body) != "c" || rec.Deliveries[0].DeliveryTag != 2 {
		t.Fatalf("after ack: %+v", rec.Deliveries)
	}
	// basic.cancel does not requeue; the delivery may still be acked.
	fsmtest.One(t, m, 6, cancel("c2", ch2))
	if r, _ := fsmtest.One(t, m, 6, settle(ch2, 1, false)); r.GetCode() != 0 {
		t.Fatalf("ack after cancel: %v", r)
	}
	// Requeue goes back to the head, redelivered.
	_, rec = fsmtest.Apply(t, m, 7, requeue(ch1, 2, false))
	if len(rec.Deliveries) != 1 || string(rec.Deliveries[0].Body) != "c" || !rec.Deliveries[0].Redelivered {
		t.Fatalf("requeue: %+v", rec.Deliveries)
	}
	// Channel close requeues the unacked delivery.
	fsmtest.One(t, m, 8, &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch1}}})
	if got := ready(t, m, "q"); got != 2 {
		t.Fatalf("after channel close: %d ready", got)
	}
	r, _ := fsmtest.One(t, m, 9, get("q", false))
	if string(r.GetGet().GetBody()) != "c" || !r.GetGet().GetRedelivered() || r.GetGet().GetMessageCount() != 1 {
		t.Fatalf("get after close: %v", r.GetGet())
	}
	roundTrip(t, m)
	st := m.Stats()
	if st.Published != 4 || st.Acked != 2 || st.Unacked != 1 || st.Ready != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMachine_AutoDeleteAndExclusive(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 2,
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ad", AutoDelete: true, Connection: conn1}}},
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "ex", Exclusive: true, Connection: conn1}}},
		consume("ad", "c", ch1, 0))
	fsmtest.One(t, m, 3, cancel("c", ch1))
	if _, ok := m.Queue("/", "ad"); ok {
		t.Fatal("auto-delete queue kept after its last consumer")
	}
	fsmtest.One(t, m, 3, consume("ex", "c", ch1, 0))
	_, rec := fsmtest.One(t, m, 4, &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: "n1"}}})
	if _, ok := m.Queue("/", "ex"); ok || len(rec.Cancelled) != 1 {
		t.Fatalf("node down: exclusive queue kept or no cancel (%d)", len(rec.Cancelled))
	}
}
