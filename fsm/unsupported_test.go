package fsm_test

import (
	"testing"

	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

func TestMachine_UnsupportedArgumentsRefused(t *testing.T) {
	m := fsmtest.New(t)
	for _, c := range []struct {
		args *proto.Table
		text string
	}{
		{table("x-queue-type", str("stream")), "PRECONDITION_FAILED - raftmq does not support queue type 'stream'"},
		{table("x-queue-type", str("foo")), `PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'q' in vhost '/': "unsupported queue type 'foo'"`},
		{table("x-max-age", str("1D")), "PRECONDITION_FAILED - raftmq does not support queue argument 'x-max-age' (stream queues)"},
		{table("x-stream-max-segment-size-bytes", i64(1000)), "PRECONDITION_FAILED - raftmq does not support queue argument 'x-stream-max-segment-size-bytes' (stream queues)"},
	} {
		r, _ := fsmtest.One(t, m, 1, declare("q", c.args))
		if r.GetCode() != 406 || r.GetText() != c.text {
			t.Fatalf("%v: %d %q", c.args, r.GetCode(), r.GetText())
		}
		if _, ok := m.Queue("/", "q"); ok {
			t.Fatal("a refused declare created the queue")
		}
	}
	// Types raftmq has, and x- arguments RabbitMQ itself ignores, pass.
	for i, args := range []*proto.Table{
		table("x-queue-type", str("classic")), table("x-queue-type", str("quorum")),
		table("x-foo", str("bar"), "x-queue-mode", str("lazy"), "x-queue-master-locator", str("min-masters")),
	} {
		name := string(rune('a' + i))
		if r, _ := fsmtest.One(t, m, 1, declare(name, args)); r.GetCode() != 0 {
			t.Fatalf("%v refused: %s", args, r.GetText())
		}
	}
	c := consume("a", "s", ch1, 0)
	c.GetConsume().Arguments = table("x-stream-offset", str("first"))
	if r, _ := fsmtest.One(t, m, 1, c); r.GetCode() != 406 || r.GetText() != "PRECONDITION_FAILED - raftmq does not support consumer argument 'x-stream-offset' (stream queues)" {
		t.Fatalf("x-stream-offset: %d %q", r.GetCode(), r.GetText())
	}
	if cs := m.Consumers("/"); len(cs) != 0 {
		t.Fatalf("a refused consume registered %v", cs)
	}
}
