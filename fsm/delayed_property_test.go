package fsm

import (
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"testing"

	"github.com/raftmq/raftmq/proto"
	pb "google.golang.org/protobuf/proto"
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
			before := a.delayed.held.Len()
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
			if a.delayed.held.Len() > before {
				held += uint64(a.delayed.held.Len() - before)
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
			if n != a.delayed.held.Len() {
				t.Fatalf("seed %d step %d: exchanges count %d delayed, the heap holds %d", seed, i, n, a.delayed.held.Len())
			}
			checkDelayedPlaces(t, a)
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

// checkDelayedPlaces: every delayed record names, by its place id, an
// exchange of the state that holds it, and an id is live exactly while its
// exchange holds messages.
func checkDelayedPlaces(t *testing.T, m *Machine) {
	t.Helper()
	live := map[uint32]bool{}
	for i := 0; i < m.delayed.held.Len(); i++ {
		_, seq, at := m.delayed.held.Key(i)
		if int(at) >= len(m.delayed.at) {
			t.Fatalf("record %d names place %d of %d", seq, at, len(m.delayed.at))
		}
		v, x := m.delayed.where(at)
		if x == nil || v.exchanges[x.name] != x || x.delayed == 0 || x.at != at {
			t.Fatalf("record %d names a place no live exchange holds", seq)
		}
		live[at] = true
	}
	if n := len(m.delayed.at) - len(m.delayed.freeAt); n != len(live) {
		t.Fatalf("%d places live, %d hold messages", n, len(live))
	}
}

// TestDelayed_RecordsShareAndFree: messages published alike share one table entry;
// releasing, cancelling, purging and deleting the exchange give back the
// entry and the exchange's place id.
func TestDelayed_RecordsShareAndFree(t *testing.T) {
	delay := &proto.Properties{Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: i64v(100)}}}}
	// Alike but for their delays they would share one entry (heldProps).
	other := &proto.Properties{ContentType: pb.String("text/plain"), Headers: &proto.Table{Fields: []*proto.Field{{Key: "x-delay", Value: i64v(200)}}}}
	declare := &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dx", Type: DelayedExchangeType,
		Arguments: &proto.Table{Fields: []*proto.Field{{Key: "x-delayed-type", Value: &proto.Value{Kind: &proto.Value_LongString{LongString: []byte("fanout")}}}}}}}}
	pub := func(p *proto.Properties) *proto.Command {
		return &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dx", RoutingKey: "k", Properties: p, Body: []byte("b")}}}
	}
	m := New()
	idx := uint64(0)
	apply := func(now int64, cmds ...*proto.Command) {
		idx++
		for _, r := range m.Apply(Entry{Index: idx, Envelope: &proto.Envelope{StampMs: now, Commands: cmds}}, DiscardSink{}) {
			if r.GetCode() != 0 {
				t.Fatalf("refused: %v", r)
			}
		}
	}
	apply(1000, &proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: Protocol}}},
		&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}}, declare)
	fill := func() {
		apply(1000, pub(delay), pub(delay), pub(delay), pub(other))
		if m.delayed.held.Len() != 4 || m.meta.Entries() != 2 || len(m.delayed.at) != 1 {
			t.Fatalf("held %d in %d entries, %d places", m.delayed.held.Len(), m.meta.Entries(), len(m.delayed.at))
		}
		checkDelayedPlaces(t, m)
	}
	empty := func(what string) {
		t.Helper()
		if m.delayed.held.Len() != 0 || m.meta.Entries() != 0 || len(m.delayed.at) != len(m.delayed.freeAt) {
			t.Fatalf("after %s: held %d, %d entries, %d places live", what, m.delayed.held.Len(), m.meta.Entries(), len(m.delayed.at)-len(m.delayed.freeAt))
		}
	}
	fill()
	apply(1150, &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: 10}}})
	if m.delayed.held.Len() != 1 || m.meta.Entries() != 1 {
		t.Fatalf("after a release: held %d in %d entries", m.delayed.held.Len(), m.meta.Entries())
	}
	apply(1150, &proto.Command{Cmd: &proto.Command_CancelDelayed{CancelDelayed: &proto.CancelDelayed{Vhost: "/", Exchange: "dx", Seq: heldSeq(m, 0)}}})
	empty("release and cancel")
	fill()
	apply(1200, &proto.Command{Cmd: &proto.Command_PurgeDelayed{PurgeDelayed: &proto.PurgeDelayed{Vhost: "/", Exchange: "dx"}}})
	empty("purge")
	fill()
	apply(1300, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "dx"}}})
	empty("exchange delete")
	apply(1300, declare)
	fill()
	// A second exchange keeps its place while dx's is freed and reused.
	dy := &proto.Command{Cmd: &proto.Command_ExchangeDeclare{ExchangeDeclare: &proto.ExchangeDeclare{Vhost: "/", Name: "dy", Type: DelayedExchangeType,
		Arguments: declare.GetExchangeDeclare().GetArguments()}}}
	apply(1300, dy, &proto.Command{Cmd: &proto.Command_Publish{Publish: &proto.Publish{Vhost: "/", Exchange: "dy", Properties: delay}}})
	apply(1300, &proto.Command{Cmd: &proto.Command_ExchangeDelete{ExchangeDelete: &proto.ExchangeDelete{Vhost: "/", Name: "dx"}}})
	if m.delayed.held.Len() != 1 || len(m.delayed.at) != 2 || len(m.delayed.freeAt) != 1 {
		t.Fatalf("dy alone: held %d, places %d, free %d", m.delayed.held.Len(), len(m.delayed.at), len(m.delayed.freeAt))
	}
	checkDelayedPlaces(t, m)
	apply(1300, declare, pub(delay))
	if len(m.delayed.at) != 2 || len(m.delayed.freeAt) != 0 {
		t.Fatalf("dx again: places %d, free %d", len(m.delayed.at), len(m.delayed.freeAt))
	}
	checkDelayedPlaces(t, m)
}

// heldSeq is the sequence number of the delayed message at position i.
func heldSeq(m *Machine, i int) uint64 {
	_, seq, _ := m.delayed.held.Key(i)
	return seq
}
