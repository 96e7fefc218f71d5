package fsm_test

import (
	"testing"

	gproto "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

// AMQP short strings need not be UTF-8: a queue, routing key, message-id
// and header key of any bytes survive a snapshot byte for byte (the
// snapshot marshals properties with protobuf).
func TestMachine_SnapshotKeepsBytesThatAreNotUTF8(t *testing.T) {
	const odd = "q\xff\xfe\xc3("
	mid := odd + "-id"
	props := &proto.Properties{
		MessageId: &mid,
		Headers:   table(odd+"-h", str(odd)),
	}
	m := fsmtest.New(t)
	fsmtest.Apply(t, m, 1000,
		declare(odd, nil),
		bind("amq.direct", odd, odd+"-key", false, table(odd+"-arg", str(odd))),
		publish("amq.direct", odd+"-key", "body", props),
	)
	if ready(t, m, odd) != 1 {
		t.Fatal("the publish was not routed by its routing key")
	}
	n := roundTrip(t, m)
	res, _ := fsmtest.One(t, n, 2000, get(odd, true))
	g := res.GetGet()
	if g == nil {
		t.Fatalf("get on the restored machine: %v", res)
	}
	if g.GetRoutingKey() != odd+"-key" || !gproto.Equal(g.GetProperties(), props) {
		t.Fatalf("restored message: key %q, properties %v; want %q, %v", g.GetRoutingKey(), g.GetProperties(), odd+"-key", props)
	}
	if b := n.Bindings("/"); len(b) == 0 {
		t.Fatal("the binding is gone after restore")
	}
}
