package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/queue"
)

type countSink struct{ n int }

func (c *countSink) Deliver(*Delivery)                                    { c.n++ }
func (c *countSink) ConsumerCancelled(*proto.ConsumerRef)                 {}
func (c *countSink) NodeDown(string)                                      {}
func (c *countSink) ChannelTimedOut(*proto.ChannelRef, int64)             {}
func (c *countSink) ConsumerTimedOut(*proto.ConsumerRef, int64, []uint64) {}

func i64v(n int64) *proto.Value { return &proto.Value{Kind: &proto.Value_Int64{Int64: n}} }

// randomCommand builds one command of a random workload.
func randomCommand(r *rand.Rand) *proto.Command {
	queues := []string{"q0", "q1", "q2", "q3"}
	q := queues[r.Intn(len(queues))]
	node := []string{"n1", "n2"}[r.Intn(2)]
	ch := &proto.ChannelRef{Node: node, Connection: "c" + strconv.Itoa(r.Intn(2)), Channel: uint32(1 + r.Intn(2))}
	conn := &proto.ConnectionRef{Node: ch.Node, Connection: ch.Connection}
	switch k := r.Intn(100); {
	case k < 8:
		args := &proto.Table{}
		switch r.Intn(4) {
		case 0:
			args.Fields = append(args.Fields, &proto.Field{Key: "x-message-ttl", Value: i64v(int64(r.Intn(3)) * 50)})
		case 1:
			args.Fields = append(args.Fields, &proto.Field{Key: "x-expires", Value: i64v(int64(1 + r.Intn(400)))})
		}
		if r.Intn(2) == 0 {
			args.Fields = append(args.Fields, &proto.Field{Key: "x-dead-letter-exchange", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("dlx")}}})
		}
		if r.Intn(4) == 0 {
			args.Fields = append(args.Fields, &proto.Field{Key: "x-max-length", Value: i64v(int64(r.Intn(5)))})
		}
		return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Arguments: args, Exclusive: r.Intn(8) == 0, Connection: conn}}}
	case k < 12:
		return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dlx", Destination: q, Connection: conn}}}
	case k < 40:
		var props *proto.Properties
		if r.Intn(2) == 0 {
			e := strconv.Itoa(r.Intn(4) * 40)
			props = &proto.Properties{Expiration: &e}
		}
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "", RoutingKey: q, Body: make([]byte, r.Intn(8)), Properties: props, Channel: ch}}}
	case k < 48:
		return &proto.Command{Cmd: &proto.Command_Consume{Consume: &proto.Consume{Vhost: "/", Queue: q, Prefetch: uint32(r.Intn(3)), NoAck: r.Intn(5) == 0,
			Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t" + strconv.Itoa(r.Intn(3))}}}}
	case k < 52:
		return &proto.Command{Cmd: &proto.Command_Cancel{Cancel: &proto.Cancel{Consumer: &proto.ConsumerRef{Channel: ch, Tag: "t" + strconv.Itoa(r.Intn(3))}}}}
	case k < 58:
		return &proto.Command{Cmd: &proto.Command_Get{Get: &proto.Get{Vhost: "/", Queue: q, NoAck: r.Intn(3) == 0, Channel: ch}}}
	case k < 66:
		return &proto.Command{Cmd: &proto.Command_Settle{Settle: &proto.Settle{Channel: ch, DeliveryTag: uint64(r.Intn(10)), Multiple: r.Intn(2) == 0}}}
	case k < 71:
		return &proto.Command{Cmd: &proto.Command_Requeue{Requeue: &proto.Requeue{Channel: ch, DeliveryTag: uint64(r.Intn(10)), Multiple: r.Intn(2) == 0}}}
	case k < 75:
		return &proto.Command{Cmd: &proto.Command_Discard{Discard: &proto.Discard{Channel: ch, DeliveryTag: uint64(r.Intn(10)), Multiple: r.Intn(2) == 0}}}
	case k < 78:
		return &proto.Command{Cmd: &proto.Command_ChannelClosed{ChannelClosed: &proto.ChannelClosed{Channel: ch}}}
	case k < 80:
		return &proto.Command{Cmd: &proto.Command_ConnectionClosed{ConnectionClosed: &proto.ConnectionClosed{Connection: conn}}}
	case k < 81:
		return &proto.Command{Cmd: &proto.Command_NodeDown{NodeDown: &proto.NodeDown{Node: node}}}
	case k < 84:
		d := &proto.PolicyDefinition{}
		if r.Intn(2) == 0 {
			d.MessageTtl = new(int64)
			*d.MessageTtl = int64(r.Intn(200))
		}
		if r.Intn(3) == 0 {
			d.MaxLength = new(int64)
			*d.MaxLength = int64(r.Intn(4))
		}
		return &proto.Command{Cmd: &proto.Command_PolicySet{PolicySet: &proto.PolicySet{Vhost: "/", Name: "p" + strconv.Itoa(r.Intn(2)), Pattern: "^q[" + strconv.Itoa(r.Intn(4)) + "-3]", ApplyTo: "queues", Priority: int32(r.Intn(3)), Definition: d, Operator: r.Intn(3) == 0}}}
	case k < 86:
		return &proto.Command{Cmd: &proto.Command_PolicyClear{PolicyClear: &proto.PolicyClear{Vhost: "/", Name: "p" + strconv.Itoa(r.Intn(2)), Operator: r.Intn(3) == 0}}}
	case k < 88:
		return &proto.Command{Cmd: &proto.Command_QueueDelete{QueueDelete: &proto.QueueDelete{Vhost: "/", Name: q, Connection: conn}}}
	default:
		return &proto.Command{Cmd: &proto.Command_Tick{Tick: &proto.Tick{}}}
	}
}

// unackedCount is the number of unacked deliveries held by channels.
func (s *state) unackedCount() uint64 {
	var n uint64
	for _, ch := range s.channels {
		n += uint64(len(ch.unacked))
	}
	return n
}

func checkConservation(t *testing.T, m *Machine) {
	t.Helper()
	st := m.Stats()
	in := st.Routed + st.DeadLettered
	out := st.Acked + st.Expired + st.Dropped + st.Rejected + st.Purged
	if in != out+st.Ready+m.unackedCount() {
		t.Fatalf("conservation: in %d != out %d + ready %d + unacked %d (%+v)", in, out, st.Ready, m.unackedCount(), st)
	}
}

func TestMachine_PropertyRandomSequences(t *testing.T) {
	var now int64
	deliverHook = func(clock int64, msg *queue.Message, fresh bool) {
		if msg.Deadline <= clock && !(fresh && msg.Deadline == clock) {
			panic(fmt.Sprintf("delivered at %d a message due at %d", clock, msg.Deadline))
		}
	}
	defer func() { deliverHook = nil }()
	var total Stats
	sequences, steps := 200, 200
	if testing.Short() {
		sequences = 50
	}
	for seed := 0; seed < sequences; seed++ {
		r := rand.New(rand.NewSource(int64(seed)))
		a, b := New(), New()
		var c *Machine
		setup := &proto.Envelope{StampMs: 1000, Commands: []*proto.Command{
			{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
		}}
		a.Apply(Entry{Index: 1, Envelope: setup}, DiscardSink{})
		b.Apply(Entry{Index: 1, Envelope: setup}, DiscardSink{})
		now = 1000
		for i := 0; i < steps; i++ {
			now += int64(r.Intn(40))
			stamp := now
			if r.Intn(10) == 0 {
				stamp -= 30 // a stamp behind the clock never moves it back
			}
			var cmds []*proto.Command
			switch r.Intn(10) {
			case 0:
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: a.DueExpiries(a.Clock())}}})
			case 1:
				for _, q := range a.DueLeases(a.Clock()) {
					cmds = append(cmds, &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: q}}})
				}
			}
			for n := 1 + r.Intn(3); n > 0; n-- {
				cmds = append(cmds, randomCommand(r))
			}
			e := Entry{Index: uint64(i + 2), Envelope: &proto.Envelope{StampMs: stamp, Commands: cmds}}
			ra, rb := a.Apply(e, &countSink{}), b.Apply(e, &countSink{})
			for j := range ra {
				if ra[j].GetCode() != rb[j].GetCode() || ra[j].GetGet().GetDeliveryTag() != rb[j].GetGet().GetDeliveryTag() {
					t.Fatalf("seed %d step %d: results differ", seed, i)
				}
			}
			if c != nil {
				c.Apply(e, &countSink{})
			}
			if i == steps/2 {
				w, _ := a.Snapshot()
				var buf bytes.Buffer
				w.WriteTo(&buf)
				c = New()
				if err := c.Restore(&buf); err != nil {
					t.Fatal(err)
				}
			}
			checkConservation(t, a)
		}
		if a.Digest() != b.Digest() || a.Digest() != c.Digest() {
			t.Fatalf("seed %d: digests differ", seed)
		}
		st := a.Stats()
		total.Delivered += st.Delivered
		total.Expired += st.Expired
		total.DeadLettered += st.DeadLettered
		total.Dropped += st.Dropped
		total.Requeued += st.Requeued
	}
	t.Logf("totals: %+v", total)
	if total.Delivered == 0 || total.Expired == 0 || total.DeadLettered == 0 || total.Dropped == 0 || total.Requeued == 0 {
		t.Fatalf("the workload misses paths: %+v", total)
	}
}
