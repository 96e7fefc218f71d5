package fsm

import (
	"bytes"
	"math/rand"
	"slices"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// The random workload in a metadata log with placement on: most of its
// queues are placed (those not exclusive and without x-expires), so
// publishes, dead letters out of the queues that stay and delayed
// releases leave through the outbox, and a leader acknowledges prefixes
// of it now and then. Two replicas that replayed the log and replicas
// restored from snapshots along the way end with equal digests and
// equal outboxes, and no placed queue ever holds a message here.
func TestPlacement_PropertyReplayEqualsRestore(t *testing.T) {
	sequences, steps := 60, 200
	if testing.Short() {
		sequences = 15
	}
	var routed, dead, local int
	for seed := range sequences {
		r := rand.New(rand.NewSource(int64(seed)))
		a, b := New(), New()
		var restored []*Machine
		index := uint64(0)
		apply := func(stamp int64, cmds ...*proto.Command) {
			index++
			e := Entry{Index: index, Envelope: &proto.Envelope{StampMs: stamp, Commands: cmds}}
			ra, rb := a.Apply(e, &countSink{}), b.Apply(e, &countSink{})
			for j := range ra {
				if ra[j].GetCode() != rb[j].GetCode() || ra[j].GetRouted() != rb[j].GetRouted() {
					t.Fatalf("seed %d entry %d: results differ", seed, index)
				}
			}
			for _, c := range restored {
				c.Apply(e, &countSink{})
			}
		}
		groups := &proto.QueueGroups{}
		for _, id := range []string{"q1", "q2", "q3"} {
			groups.Groups = append(groups.Groups, &proto.QueueGroup{Id: id, Members: []*proto.QueueGroupMember{{Id: "n1", Addr: "n1:1"}}})
		}
		apply(1000,
			&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
			&proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: Protocol}}},
			&proto.Command{Cmd: &proto.Command_QueueGroups{QueueGroups: groups}},
			&proto.Command{Cmd: &proto.Command_PlaceQueues{PlaceQueues: &proto.PlaceQueues{}}},
			&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dlx", Type: "fanout"}}},
			&proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: DelayedExchangeType,
				Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("direct")}}}}}}}})
		now := int64(1000)
		for i := range steps {
			now += int64(r.Intn(40))
			var cmds []*proto.Command
			switch r.Intn(12) {
			case 0:
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: a.DueExpiries(a.Clock())}}})
			case 1:
				for _, q := range a.DueLeases(a.Clock()) {
					cmds = append(cmds, &proto.Command{Cmd: &proto.Command_ExpireQueue{ExpireQueue: &proto.ExpireQueue{Queue: q}}})
				}
			case 2:
				if out := a.Outbox(0, 0); len(out) > 0 {
					// A leader's acknowledgement of a prefix.
					up := out[r.Intn(len(out))].Key
					cmds = append(cmds, &proto.Command{Cmd: &proto.Command_HandOffDone{HandOffDone: &proto.HandOffDone{UpTo: up}}})
				}
			case 3:
				q := []string{"q0", "q1", "q2", "q3"}[r.Intn(4)]
				cmds = append(cmds,
					&proto.Command{Cmd: &proto.Command_Bind{Bind: &proto.Bind{Vhost: "/", Source: "dx", Destination: q, RoutingKey: q}}},
					&proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: q, Body: []byte("d"),
						Properties: &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: i64v(int64(1 + r.Intn(100)))}}}}}}})
			case 4:
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: 10}}})
			}
			for n := 1 + r.Intn(3); n > 0; n-- {
				cmds = append(cmds, randomCommand(r))
			}
			apply(now, cmds...)
			if i%50 == 25 {
				w, _ := a.Snapshot()
				var buf bytes.Buffer
				if _, err := w.WriteTo(&buf); err != nil {
					t.Fatal(err)
				}
				c := New()
				if err := c.Restore(&buf); err != nil {
					t.Fatal(err)
				}
				restored = append(restored, c)
			}
			for _, v := range a.vhosts {
				for _, q := range v.queues {
					if q.group != "" && (q.q.Len() > 0 || q.unacked > 0 || len(q.consumers) > 0) {
						t.Fatalf("seed %d: placed queue %s holds messages or consumers here", seed, q.name)
					}
					if q.group == "" && q.q.Len() > 0 {
						local++
					}
				}
			}
			checkConservation(t, a)
		}
		want := a.Digest()
		if b.Digest() != want {
			t.Fatalf("seed %d: replicas that replayed differ", seed)
		}
		out := a.Outbox(0, 0)
		for k, c := range restored {
			if c.Digest() != want {
				t.Fatalf("seed %d: the replica restored %d differs", seed, k)
			}
			if got := c.Outbox(0, 0); !slices.EqualFunc(got, out, func(x, y OutboxEntry) bool {
				return x.Key == y.Key && slices.Equal(x.Queues, y.Queues) && x.Body == y.Body && x.DeadLettered == y.DeadLettered
			}) {
				t.Fatalf("seed %d: the replica restored %d has another outbox", seed, k)
			}
		}
		for _, e := range out {
			if len(e.Queues) == 0 {
				t.Fatalf("seed %d: an outbox entry of the metadata group without its queues: %+v", seed, e)
			}
			routed++
			if e.DeadLettered {
				dead++
			}
		}
	}
	t.Logf("outbox entries at the ends: %d, of them dead letters %d; metadata queues holding messages (steps): %d", routed, dead, local)
	if routed == 0 || dead == 0 || local == 0 {
		t.Fatal("the workload misses paths")
	}
}
