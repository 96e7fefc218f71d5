package fsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"unsafe"

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
			before := a.delayed.h.len()
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
			if a.delayed.h.len() > before {
				held += uint64(a.delayed.h.len() - before)
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
			if n != a.delayed.h.len() {
				t.Fatalf("seed %d step %d: exchanges count %d delayed, the heap holds %d", seed, i, n, a.delayed.h.len())
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
	for i := 0; i < m.delayed.h.len(); i++ {
		r := m.delayed.h.at(i)
		if int(r.at) >= len(m.delayed.at) {
			t.Fatalf("record %d names place %d of %d", r.seq, r.at, len(m.delayed.at))
		}
		v, x := m.delayed.where(r)
		if x == nil || v.exchanges[x.name] != x || x.delayed == 0 || x.at != r.at {
			t.Fatalf("record %d names a place no live exchange holds", r.seq)
		}
		live[r.at] = true
	}
	if n := len(m.delayed.at) - len(m.delayed.freeAt); n != len(live) {
		t.Fatalf("%d places live, %d hold messages", n, len(live))
	}
}

// TestDelayed_RecordsShareAndFree: a waiting message is a pointer-free
// record of 48 bytes; messages published alike share one table entry;
// releasing, cancelling, purging and deleting the exchange give back the
// entry and the exchange's place id.
func TestDelayed_RecordsShareAndFree(t *testing.T) {
	if n := unsafe.Sizeof(delayedRec{}); n != 48 {
		t.Fatalf("a delayed record is %d bytes", n)
	}
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
		if m.delayed.h.len() != 4 || m.meta.Entries() != 2 || len(m.delayed.at) != 1 {
			t.Fatalf("held %d in %d entries, %d places", m.delayed.h.len(), m.meta.Entries(), len(m.delayed.at))
		}
		checkDelayedPlaces(t, m)
	}
	empty := func(what string) {
		t.Helper()
		if m.delayed.h.len() != 0 || m.meta.Entries() != 0 || len(m.delayed.at) != len(m.delayed.freeAt) {
			t.Fatalf("after %s: held %d, %d entries, %d places live", what, m.delayed.h.len(), m.meta.Entries(), len(m.delayed.at)-len(m.delayed.freeAt))
		}
	}
	fill()
	apply(1150, &proto.Command{Cmd: &proto.Command_ReleaseDelayed{ReleaseDelayed: &proto.ReleaseDelayed{Limit: 10}}})
	if m.delayed.h.len() != 1 || m.meta.Entries() != 1 {
		t.Fatalf("after a release: held %d in %d entries", m.delayed.h.len(), m.meta.Entries())
	}
	apply(1150, &proto.Command{Cmd: &proto.Command_CancelDelayed{CancelDelayed: &proto.CancelDelayed{Vhost: "/", Exchange: "dx", Seq: m.delayed.h.at(0).seq}}})
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
	if m.delayed.h.len() != 1 || len(m.delayed.at) != 2 || len(m.delayed.freeAt) != 1 {
		t.Fatalf("dy alone: held %d, places %d, free %d", m.delayed.h.len(), len(m.delayed.at), len(m.delayed.freeAt))
	}
	checkDelayedPlaces(t, m)
	apply(1300, declare, pub(delay))
	if len(m.delayed.at) != 2 || len(m.delayed.freeAt) != 0 {
		t.Fatalf("dx again: places %d, free %d", len(m.delayed.at), len(m.delayed.freeAt))
	}
	checkDelayedPlaces(t, m)
}

// plainHeap is the heap on one plain slice, as the records were held
// before blocks.
type plainHeap []delayedRec

func (p plainHeap) Len() int { return len(p) }
func (p plainHeap) Less(i, j int) bool {
	if p[i].due != p[j].due {
		return p[i].due < p[j].due
	}
	return p[i].seq < p[j].seq
}
func (p plainHeap) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *plainHeap) Push(x any)   { *p = append(*p, x.(delayedRec)) }
func (p *plainHeap) Pop() any {
	n := len(*p) - 1
	x := (*p)[n]
	*p = (*p)[:n]
	return x
}

// TestDelayed_BlocksKeepHeapLayout: the heap in blocks holds its records
// at the positions a heap on one slice would, across block edges, through
// pushes, pops, removes and a filtered rebuild; truncating frees blocks.
func TestDelayed_BlocksKeepHeapLayout(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var d delayedSet
	var p plainHeap
	seq := uint64(0)
	same := func(step int) {
		t.Helper()
		if d.h.len() != len(p) {
			t.Fatalf("step %d: %d records, want %d", step, d.h.len(), len(p))
		}
		for i := range p {
			if *d.h.at(i) != p[i] {
				t.Fatalf("step %d: position %d differs", step, i)
			}
		}
	}
	for step := 0; step < 20000; step++ {
		switch k := r.Intn(10); {
		case k < 6 || len(p) == 0:
			seq++
			x := delayedRec{due: int64(r.Intn(500)), seq: seq}
			d.add(x)
			heap.Push(&p, x)
		case k < 8:
			if got, want := d.pop(), heap.Pop(&p).(delayedRec); got != want {
				t.Fatalf("step %d: popped %v, want %v", step, got, want)
			}
		case k < 9:
			i := r.Intn(len(p))
			if got, want := d.remove(i), heap.Remove(&p, i).(delayedRec); got != want {
				t.Fatalf("step %d: removed %v, want %v", step, got, want)
			}
		default:
			odd := func(x delayedRec) bool { return x.seq%7 == 0 }
			w := 0
			for i := 0; i < d.h.len(); i++ {
				if x := *d.h.at(i); !odd(x) {
					*d.h.at(w) = x
					w++
				}
			}
			d.h.truncate(w)
			p = deleteFunc(p, odd)
			heap.Init(&d)
			heap.Init(&p)
		}
		if step%97 == 0 {
			same(step)
		}
	}
	same(-1)
	if d.h.len() < 2*recBlock {
		t.Fatalf("only %d records: the blocks' edges are not crossed", d.h.len())
	}
	for len(p) > recBlock/2 {
		if got, want := d.pop(), heap.Pop(&p).(delayedRec); got != want {
			t.Fatalf("draining: popped %v, want %v", got, want)
		}
	}
	same(-2)
	if len(d.h.b) > 2 {
		t.Fatalf("%d blocks for %d records", len(d.h.b), d.h.len())
	}
	d.h.truncate(0)
	if len(d.h.b) != 0 {
		t.Fatalf("%d blocks left when empty", len(d.h.b))
	}
}
