package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// What a declare says on its own is refused with RabbitMQ 3.10.8's own
// words (read from a real node with pika), before it reaches a log; what
// RabbitMQ lets through goes on.
func TestDeclareRefusal(t *testing.T) {
	i32 := func(n int32) *proto.Value { return &proto.Value{Kind: &proto.Value_Int32{Int32: n}} }
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
		r := fsm.DeclareRefusal(c.d)
		switch {
		case c.want == "" && r != nil:
			t.Errorf("%s: refused %d %q", c.name, r.GetCode(), r.GetText())
		case c.want != "" && (r.GetCode() != 406 || r.GetText() != c.want):
			t.Errorf("%s: %d %q, want 406 %q", c.name, r.GetCode(), r.GetText(), c.want)
		}
	}
}
