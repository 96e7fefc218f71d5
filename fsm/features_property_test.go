package fsm

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// randomFeatureCommand is randomCommand with the queue features mixed in:
// priority, single-active-consumer and delivery-limited queues, messages
// with priorities and consumers with x-priority.
func randomFeatureCommand(r *rand.Rand) *proto.Command {
	c := randomCommand(r)
	switch x := c.GetCmd().(type) {
	case *proto.Command_QueueDeclare:
		args := x.QueueDeclare.Arguments
		switch r.Intn(3) {
		case 0:
			args.Fields = append(args.Fields, &proto.Field{Key: "x-max-priority", Value: i64v(int64(r.Intn(4)))})
		case 1:
			args.Fields = append(args.Fields, &proto.Field{Key: "x-single-active-consumer", Value: &proto.Value{Kind: &proto.Value_Bool{Bool: true}}})
		}
		if r.Intn(2) == 0 {
			args.Fields = append(args.Fields, &proto.Field{Key: "x-delivery-limit", Value: i64v(int64(r.Intn(3)))})
		}
	case *proto.Command_Publish:
		if r.Intn(2) == 0 {
			p := x.Publish.Properties
			if p == nil {
				p = &proto.Properties{}
			}
			prio := uint32(r.Intn(6))
			p.Priority = &prio
			x.Publish.Properties = p
		}
	case *proto.Command_Consume:
		if r.Intn(3) == 0 {
			x.Consume.Arguments = &proto.Table{Fields: []*proto.Field{{Key: "x-priority", Value: i64v(int64(r.Intn(3)))}}}
		}
	case *proto.Command_PolicySet:
		if r.Intn(2) == 0 {
			n := int64(r.Intn(3))
			x.PolicySet.Definition.DeliveryLimit = &n
		}
	}
	return c
}

// The features keep replicas byte-identical, survive a snapshot taken
// mid-run, and conserve messages (delivery-limit deaths count as
// rejected).
func TestMachine_PropertyFeatureSequences(t *testing.T) {
	sequences, steps := 150, 200
	if testing.Short() {
		sequences = 40
	}
	var returnedDead, prioritized, sac int
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
				cmds = append(cmds, randomFeatureCommand(r))
			}
			e := Entry{Index: uint64(i + 2), Envelope: &proto.Envelope{StampMs: now, Commands: cmds}}
			before := a.stats.Rejected
			ra, rb := a.Apply(e, &countSink{}), b.Apply(e, &countSink{})
			for j := range ra {
				if ra[j].GetCode() != rb[j].GetCode() || ra[j].GetGet().GetDeliveryTag() != rb[j].GetGet().GetDeliveryTag() {
					t.Fatalf("seed %d step %d: results differ", seed, i)
				}
			}
			if hasRequeue(cmds) && a.stats.Rejected > before {
				returnedDead++
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
		}
		if a.Digest() != b.Digest() || a.Digest() != c.Digest() {
			t.Fatalf("seed %d: digests differ", seed)
		}
		for _, q := range a.vhosts["/"].queues {
			if q.q.MaxPriority() > 0 {
				prioritized++
			}
			if q.parsed.sac {
				sac++
			}
		}
	}
	t.Logf("delivery-limit deaths in %d entries; %d priority and %d single-active-consumer queues at the end", returnedDead, prioritized, sac)
	if returnedDead == 0 || prioritized == 0 || sac == 0 {
		t.Fatal("the workload misses the features")
	}
}

// hasRequeue reports whether cmds return deliveries and discard none, so
// that a rise of Stats.Rejected in their entry is a delivery-limit death.
func hasRequeue(cmds []*proto.Command) bool {
	returns := false
	for _, c := range cmds {
		switch c.GetCmd().(type) {
		case *proto.Command_Requeue, *proto.Command_ChannelClosed, *proto.Command_ConnectionClosed, *proto.Command_NodeDown:
			returns = true
		case *proto.Command_Discard:
			return false
		}
	}
	return returns
}
