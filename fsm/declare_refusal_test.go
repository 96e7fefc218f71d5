package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// What a declare says on its own is refused with RabbitMQ 3.10.8's own
// words (read from a real node with pika), before it reaches a log; what
// RabbitMQ lets through goes on.
func TestDeclareRefusal(t *testing.T) {
	qq := func(kv ...any) *proto.Table { return table(append([]any{"x-queue-type", str("quorum")}, kv...)...) }
	const pre = "PRECONDITION_FAILED - "
	for _, c := range []struct {
		name string
		d    *proto.QueueDeclare
		want string // "" for no refusal
	}{
		{"routing key, no exchange", &proto.QueueDeclare{Name: "q", Arguments: table("x-dead-letter-routing-key", str("k"))},
			pre + "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"},
		{"routing key and exchange", &proto.QueueDeclare{Name: "q", Arguments: table("x-dead-letter-routing-key", str("k"), "x-dead-letter-exchange", str("dx"))}, ""},
		{"unknown mode", &proto.QueueDeclare{Name: "q", Arguments: table("x-queue-mode", str("bogus"))},
			pre + `invalid arg 'x-queue-mode' for queue 'q' in vhost '/': "unsupported queue mode 'bogus'"`},
		{"mode not a string", &proto.QueueDeclare{Name: "q", Arguments: table("x-queue-mode", i32(1))},
			pre + "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': {unacceptable_type,signedint}"},
		{"lazy", &proto.QueueDeclare{Name: "q", Arguments: table("x-queue-mode", str("lazy"))}, ""},
		{"default", &proto.QueueDeclare{Name: "q", Arguments: table("x-queue-mode", str("default"))}, ""},
		{"quorum auto-delete", &proto.QueueDeclare{Name: "q", Durable: true, AutoDelete: true, Arguments: qq()},
			pre + "invalid property 'auto-delete' for queue 'q' in vhost '/'"},
		{"quorum exclusive", &proto.QueueDeclare{Name: "q", Durable: true, Exclusive: true, Arguments: qq()},
			pre + "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"},
		{"quorum not durable", &proto.QueueDeclare{Name: "q", Arguments: qq()},
			pre + "invalid property 'non-durable' for queue 'q' in vhost '/'"},
		{"quorum, all three: auto-delete first", &proto.QueueDeclare{Name: "q", AutoDelete: true, Exclusive: true, Arguments: qq()},
			pre + "invalid property 'auto-delete' for queue 'q' in vhost '/'"},
		{"quorum durable", &proto.QueueDeclare{Name: "q", Durable: true, Arguments: qq()}, ""},
		{"classic exclusive auto-delete", &proto.QueueDeclare{Name: "q", Exclusive: true, AutoDelete: true, Arguments: table("x-queue-type", str("classic"))}, ""},
		{"passive quorum, not durable", &proto.QueueDeclare{Name: "q", Passive: true, Arguments: qq()}, ""},
		{"passive, routing key alone", &proto.QueueDeclare{Name: "q", Passive: true, Arguments: table("x-dead-letter-routing-key", str("k"))}, ""},
	} {
		c.d.Vhost = "/"
		wantRefusal(t, c.name, fsm.DeclareRefusal(c.d), c.want)
	}
}

// A bind to a headers exchange with an x-match RabbitMQ does not know is
// refused in its words; other exchanges, and exchanges not held, are left
// to the log.
func TestBindRefusal(t *testing.T) {
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1, exchangeDeclare("h", "headers", nil), exchangeDeclare("d", "direct", nil))
	bindTo := func(x string, match *proto.Value) *proto.Bind {
		return bind(x, "q", "", false, table("x-match", match)).GetBind()
	}
	for _, c := range []struct {
		name string
		b    *proto.Bind
		want string
	}{
		{"unknown mode", bindTo("h", str("bogus")), `PRECONDITION_FAILED - Invalid x-match field value <<"bogus">>; expected all, any, all-with-x, or any-with-x`},
		{"not a string", bindTo("h", i32(1)), "PRECONDITION_FAILED - Invalid x-match field type signedint (value 1); expected longstr"},
		{"any-with-x", bindTo("h", str("any-with-x")), ""},
		{"all", bindTo("h", str("all")), ""},
		{"amq.headers", bindTo("amq.headers", str("some")), `PRECONDITION_FAILED - Invalid x-match field value <<"some">>; expected all, any, all-with-x, or any-with-x`},
		{"a direct exchange", bindTo("d", str("bogus")), ""},
		{"an exchange not held", bindTo("nope", str("bogus")), ""},
		{"no x-match", bind("h", "q", "", false, nil).GetBind(), ""},
	} {
		wantRefusal(t, c.name, m.BindRefusal(c.b), c.want)
	}
}

// wantRefusal checks r against want: no refusal for "", else 406 with
// want as its text.
func wantRefusal(t *testing.T, name string, r *proto.Result, want string) {
	t.Helper()
	switch {
	case want == "" && r != nil:
		t.Errorf("%s: refused %d %q", name, r.GetCode(), r.GetText())
	case want != "" && (r.GetCode() != 406 || r.GetText() != want):
		t.Errorf("%s: %d %q, want 406 %q", name, r.GetCode(), r.GetText(), want)
	}
}
