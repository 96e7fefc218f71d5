package fsm_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/fsm/fsmtest"
	"github.com/raftmq/raftmq/proto"
)

var (
	conn1 = &proto.ConnectionRef{Node: "n1", Connection: "c1"}
	ch1   = &proto.ChannelRef{Node: "n1", Connection: "c1", Channel: 1}
	ch2   = &proto.ChannelRef{Node: "n2", Connection: "c2", Channel: 1}
)

func init() { fsm.BodyOf = fsmtest.Body }

func i64(n int64) *proto.Value { return &proto.Value{Kind: &proto.Value_Int64{Int64: n}} }
func i32(n int32) *proto.Value { return &proto.Value{Kind: &proto.Value_Int32{Int32: n}} }
func str(s string) *proto.Value {
	return &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(s)}}
}

func table(kv ...any) *proto.Table {
	t := &proto.Table{}
	for i := 0; i < len(kv); i += 2 {
		t.Fields = append(t.Fields, &proto.Field{Key: kv[i].(string), Value: kv[i+1].(*proto.Value)})
	}
	return t
}

func declare(name string, args *proto.Table) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: name, Arguments: args, Connection: conn1}}}
}

func exchangeDeclare(name, typ string, args *proto.Table) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: name, Type: typ, Arguments: args}}}
}

func bind(src, dst, key string, toEx bool, args *proto.Table) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: src, Destination: dst, RoutingKey: key, DestinationIsExchange: toEx, Arguments: args, Connection: conn1}}}
}

func publish(ex, key, body string, props *proto.Properties) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: ex, RoutingKey: key, Body: []byte(body), Properties: props, Channel: ch1}}}
}

func expiring(ms string) *proto.Properties { return &proto.Properties{Expiration: &ms} }

func get(q string, noAck bool) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: q, NoAck: noAck, Channel: ch1}}}
}

func consume(q, tag string, ch *proto.ChannelRef, prefetch uint32) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: q, Prefetch: prefetch,
		Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}}}}
}

func cancel(tag string, ch *proto.ChannelRef) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: &proto.ConsumerRef{Channel: ch, Tag: tag}}}}
}

func settle(ch *proto.ChannelRef, tag uint64, multiple bool) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ch, DeliveryTag: tag, Multiple: multiple}}}
}

func requeue(ch *proto.ChannelRef, tag uint64, multiple bool) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch, DeliveryTag: tag, Multiple: multiple}}}
}

// reject is basic.reject with requeue: a failed delivery attempt.
func reject(ch *proto.ChannelRef, tag uint64) *proto.Command {
	c := requeue(ch, tag, false)
	c.GetRequeue().Failed = true
	return c
}

func discard(ch *proto.ChannelRef, tag uint64, multiple bool) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_Discard{Discard: &proto.Discard{Channel: ch, DeliveryTag: tag, Multiple: multiple}}}
}

func expire(qs ...string) *proto.Command {
	e := &proto.Expire{}
	for _, q := range qs {
		e.Queues = append(e.Queues, &proto.QueueRef{Vhost: "/", Name: q})
	}
	return &proto.Command{Cmd: &proto.Command_Expire{Expire: e}}
}

func policySet(name, pattern string, prio int32, operator bool, d *proto.PolicyDefinition) *proto.Command {
	return &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: name, Pattern: pattern, ApplyTo: "queues", Priority: prio, Definition: d, Operator: operator}}}
}

func ptr[T any](v T) *T { return &v }

func ready(t *testing.T, m *fsm.Machine, q string) uint64 {
	t.Helper()
	qi, ok := m.Queue("/", q)
	if !ok {
		t.Fatalf("queue %q missing", q)
	}
	return qi.GetReady()
}

// replayLog applies log, one entry for each element, to a new machine at
// level; after entry restoreAt (none when negative) the machine is replaced
// by one restored from its snapshot.
func replayLog(t testing.TB, level uint32, log [][]*proto.Command, restoreAt int) (*fsm.Machine, [][]*proto.Result) {
	t.Helper()
	m := fsmtest.NewAt(t, level)
	var res [][]*proto.Result
	for i, cmds := range log {
		r, _ := fsmtest.Apply(t, m, int64(100+i), cmds...)
		res = append(res, r)
		if i == restoreAt {
			m = roundTrip(t, m)
		}
	}
	return m, res
}

func roundTrip(t testing.TB, m *fsm.Machine) *fsm.Machine {
	t.Helper()
	w, err := m.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	n := restoreFrom(t, w)
	w.(fsm.Releaser).Release()
	if n.Digest() != m.Digest() {
		t.Fatal("digest differs after snapshot round trip")
	}
	return n
}

// restoreFrom writes snapshot w out and restores a new machine from it.
func restoreFrom(t testing.TB, w io.WriterTo) *fsm.Machine {
	t.Helper()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	n := fsm.New()
	if err := n.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return n
}
