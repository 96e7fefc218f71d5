package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// randomDelayedCommand is randomCommand with a delayed exchange mixed in:
// declared (and deleted) now and then, bound to the queues, published to
// with every kind of x-delay, used as a dead-letter exchange, released
// in small batches, and cancelled from.
func randomDelayedCommand(r *rand.Rand, m *Machine) *proto.Command {
	q := "q" + strconv.Itoa(r.Intn(4))
	switch k := r.Intn(100); {
	case k < 3:
		return &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: DelayedExchangeType,
			Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("fanout")}}}}}}}}
	case k < 4:
		return &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "dx"}}}
	case k < 8:
		return &proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: q}}}
	case k < 25:
		var v *proto.Value
		switch r.Intn(5) {
		case 0:
			v = &proto.Value{Kind: &proto.Value_Int32{Int32: int32(r.Intn(300) - 20)}}
		case 1:
			v = &proto.Value{Kind: &proto.Value_LongString{LongString: []byte(strconv.Itoa(r.Intn(300)))}}
		case 2:
			v = &proto.Value{Kind: &proto.Value_Float64{Float64: float64(r.Intn(3000)) / 10}}
		default:
			v = i64v(int64(1 + r.Intn(200)))
		}
		props := &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: v}}}}
		if r.Intn(4) == 0 {
			e := strconv.Itoa(r.Intn(4) * 40)
			props.Expiration = &e
		}
		ex := "dx"
		if r.Intn(3) == 0 {
			ex = "" // straight into a queue, to be dead-lettered into dx
		}
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: ex, RoutingKey: q, Mandatory: r.Intn(4) == 0,
			Properties: props, Body: make([]byte, r.Intn(8))}}}
	case k < 30:
		return &proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: q, Arguments: &proto.Table{Fields: []*proto.Field{
			{Key: "x-dead-letter-exchange", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("dx")}}},
			{Key: "x-message-ttl", Value: i64v(int64(r.Intn(3)) * 50)}}}}}}
	case k < 40:
		return &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: uint32(1 + r.Intn(4))}}}
	case k < 42:
		seq := uint64(1 + r.Intn(int(m.delayed.seq+1)))
		return &proto.Command{Cmd: &proto.Command_CancelDelayed{CancelDelayed: &proto.CancelDelayed{Vhost: "/", Exchange: "dx", Seq: seq}}}
	case k < 43:
		return &proto.Command{Cmd: &proto.Command_PurgeDelayed{PurgeDelayed: &proto.PurgeDelayed{Vhost: "/", Exchange: "dx"}}}
	}
	return randomCommand(r)
}

// Delayed messages keep replicas byte-identical, survive a snapshot taken
// mid-run, are never released before their due time, and conserve
// messages: a held message enters the counts when it is released.
func TestDelayed_PropertyRandomSequences(t *testing.T) {
	releaseHook = func(now, due int64) {
		if due > now {
			panic(fmt.Sprintf("released at %d a message due at %d", now, due))
		}
	}
	defer func() { releaseHook = nil }()
	sequences, steps := 100, 300
	if testing.Short() {
		sequences = 30
	}
	var released, held, cancelled, purged uint64
	for seed := 0; seed < sequences; seed++ {
		r := rand.New(rand.NewSource(int64(seed)))
		a, b := New(), New()
		var c *Machine
		setup := &proto.Envelope{StampMs: 1000, Commands: []*proto.Command{
			{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: Protocol}}},
			{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
		}}
		a.Apply(Entry{Index: 1, Envelope: setup}, DiscardSink{})
		b.Apply(Entry{Index: 1, Envelope: setup}, DiscardSink{})
		now := int64(1000)
		for i := 0; i < steps; i++ {
			now += int64(r.Intn(40))
			var cmds []*proto.Command
			if r.Intn(10) == 0 {
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: a.DueExpiries(a.Clock())}}})
			}
			for n := 1 + r.Intn(3); n > 0; n-- {
				cmds = append(cmds, randomDelayedCommand(r, a))
			}
			e := Entry{Index: uint64(i + 2), Envelope: &proto.Envelope{StampMs: now, Commands: cmds}}
			before := len(a.delayed.h)
			ra, rb := a.Apply(e, &countSink{}), b.Apply(e, &countSink{})
			for j := range ra {
				if ra[j].GetCode() != rb[j].GetCode() || ra[j].GetRouted() != rb[j].GetRouted() {
					t.Fatalf("seed %d step %d: results differ", seed, i)
				}
				if cmds[j].GetCancelDelayed() != nil && ra[j].GetCode() == 0 {
					cancelled++
				}
				if cmds[j].GetReleaseDelayed() != nil {
					released++
				}
				if cmds[j].GetPurgeDelayed() != nil {
					purged += uint64(ra[j].GetMessageCount())
				}
			}
			if len(a.delayed.h) > before {
				held += uint64(len(a.delayed.h) - before)
			}
			if c != nil {
				c.Apply(e, &countSink{})
			}
			if i == steps/2 {
				w, _ := a.Snapshot()
				var buf bytes.Buffer
				if _, err := w.WriteTo(&buf); err != nil {
					t.Fatal(err)
				}
				c = New()
				if err := c.Restore(&buf); err != nil {
					t.Fatal(err)
				}
			}
			checkConservation(t, a)
			n := 0
			for _, x := range a.vhosts["/"].exchanges {
				n += x.delayed
			}
			if n != len(a.delayed.h) {
				t.Fatalf("seed %d step %d: exchanges count %d delayed, the heap holds %d", seed, i, n, len(a.delayed.h))
			}
		}
		if a.Digest() != b.Digest() || a.Digest() != c.Digest() {
			t.Fatalf("seed %d: digests differ", seed)
		}
	}
	t.Logf("%d messages held, %d release commands, %d cancelled, %d purged", held, released, cancelled, purged)
	if held == 0 || cancelled == 0 || purged == 0 {
		t.Fatal("the workload misses paths")
	}
}
