package fsm

import (
	"bytes"
	"math/rand"
	"testing"

	"github.com/raftmq/raftmq/proto"
)

// groupReplicas is one group's log applied by three replicas: a, b from
// the start and c restored from a's snapshot at some entry.
type groupReplicas struct {
	a, b, c *Machine
	index   uint64
}

func newGroupReplicas(t *testing.T, id uint32) *groupReplicas {
	g := &groupReplicas{a: New(), b: New()}
	g.apply(t, 1000,
		&proto.Command{Cmd: &proto.Command_VhostPut{VhostPut: &proto.VhostPut{Name: "/"}}},
		&proto.Command{Cmd: &proto.Command_SetProtocol{SetProtocol: &proto.SetProtocol{Level: Protocol}}},
		&proto.Command{Cmd: &proto.Command_GroupInit{GroupInit: &proto.GroupInit{Group: id}}},
		&proto.Command{Cmd: &proto.Command_QueueDeclare{QueueDeclare: &proto.QueueDeclare{Vhost: "/", Name: "d"}}})
	return g
}

func (g *groupReplicas) apply(t *testing.T, stamp int64, cmds ...*proto.Command) []*proto.Result {
	t.Helper()
	g.index++
	e := Entry{Index: g.index, Envelope: &proto.Envelope{StampMs: stamp, Commands: cmds}}
	ra, rb := g.a.Apply(e, &countSink{}), g.b.Apply(e, &countSink{})
	for j := range ra {
		if ra[j].GetCode() != rb[j].GetCode() {
			t.Fatalf("entry %d: results differ", g.index)
		}
	}
	if g.c != nil {
		g.c.Apply(e, &countSink{})
	}
	return ra
}

func (g *groupReplicas) restore(t *testing.T) {
	t.Helper()
	w, _ := g.a.Snapshot()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	w.(Releaser).Release()
	g.c = New()
	if err := g.c.Restore(&buf); err != nil {
		t.Fatal(err)
	}
}

func (g *groupReplicas) check(t *testing.T, seed int) {
	t.Helper()
	if g.a.Digest() != g.b.Digest() || (g.c != nil && g.a.Digest() != g.c.Digest()) {
		t.Fatalf("seed %d: digests differ at entry %d", seed, g.index)
	}
}

// A source queue group runs the random workload with dead-letter
// exchanges it does not hold; a leader that fails over at random hands
// its outbox to two target groups (each entry routed to one of them, or
// nowhere), proposing each entry any number of times and in any order,
// and acknowledges prefixes of what the targets committed. Every entry
// reaches its target once, the source forgets exactly what was
// acknowledged, a target keeps no key at or below the acknowledged
// prefix it was told of, and in every group replicas that replayed and
// a replica restored midway agree.
func TestGroups_PropertyHandOffAcrossFailovers(t *testing.T) {
	sequences, steps := 60, 200
	if testing.Short() {
		sequences = 15
	}
	var handed uint64
	for seed := range sequences {
		r := rand.New(rand.NewSource(int64(seed)))
		src := newGroupReplicas(t, 1)
		dst := []*groupReplicas{newGroupReplicas(t, 2), newGroupReplicas(t, 3)}
		now := int64(1000)
		route := map[uint64]int{} // key -> target, -1 for none
		done := map[uint64]bool{} // keys their target applied, or routed nowhere
		told := make([]uint64, 2) // the last acknowledged prefix each target was told
		committed := make([]int, 2)
		var acked uint64
		for i := range steps {
			now += int64(r.Intn(40))
			cmds := []*proto.Command{}
			if r.Intn(8) == 0 {
				cmds = append(cmds, &proto.Command{Cmd: &proto.Command_Expire{Expire: &proto.Expire{Queues: src.a.DueExpiries(src.a.Clock())}}})
			}
			for n := 1 + r.Intn(3); n > 0; n-- {
				cmds = append(cmds, randomCommand(r))
			}
			src.apply(t, now, cmds...)
			if i == steps/2 {
				src.restore(t)
				dst[0].restore(t)
				dst[1].restore(t)
			}
			checkConservation(t, src.a)
			// The leader: a page of the outbox, shuffled, some twice,
			// some left for the next leader.
			out := src.a.Outbox(acked, 1+r.Intn(6))
			r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
			hs := make([][]*proto.Command, 2)
			for _, e := range out {
				if _, ok := route[e.Key]; !ok {
					route[e.Key] = r.Intn(3) - 1
				}
				to := route[e.Key]
				if to < 0 {
					done[e.Key] = true
					continue
				}
				for range r.Intn(3) {
					hs[to] = append(hs[to], e.HandOffCommand(1, nil, []string{"d"}))
				}
			}
			for to, cs := range hs {
				if len(cs) == 0 {
					continue
				}
				dst[to].apply(t, now, cs...)
				for _, h := range cs {
					if !done[h.GetHandOff().GetKey()] {
						committed[to]++
					}
					done[h.GetHandOff().GetKey()] = true
					told[to] = max(told[to], h.GetHandOff().GetDone())
				}
			}
			// Acknowledge the prefix the targets hold, or a part of it.
			upTo := acked
			for done[upTo+1] {
				upTo++
			}
			if upTo > acked && r.Intn(3) > 0 {
				upTo = acked + 1 + uint64(r.Intn(int(upTo-acked)))
				src.apply(t, now, &proto.Command{Cmd: &proto.Command_HandOffDone{HandOffDone: &proto.HandOffDone{UpTo: upTo}}})
				acked = upTo
			}
			if e := src.a.Outbox(0, 1); len(e) > 0 && e[0].Key <= acked {
				t.Fatalf("seed %d: key %d still in the outbox after done up to %d", seed, e[0].Key, acked)
			}
			for to, d := range dst {
				if got := d.a.Stats().DeadLettered; got != uint64(committed[to]) {
					t.Fatalf("seed %d step %d: target %d enqueued %d dead letters for %d keys", seed, i, to, got, committed[to])
				}
				if a := d.a.groups.in[1]; a != nil && (a.floor < told[to] || len(a.above) > 0 && a.above[0] <= a.floor+1) {
					t.Fatalf("seed %d step %d: target %d keeps floor %d above %v, told %d", seed, i, to, a.floor, a.above, told[to])
				}
			}
		}
		src.check(t, seed)
		for _, d := range dst {
			d.check(t, seed)
		}
		if n := src.a.OutboxLen() + int(acked); uint64(n) != src.a.groups.out.seq {
			t.Fatalf("seed %d: %d in the outbox and %d acknowledged of %d keys", seed, src.a.OutboxLen(), acked, src.a.groups.out.seq)
		}
		handed += uint64(committed[0] + committed[1])
	}
	if handed == 0 {
		t.Fatal("no dead letter crossed: the workload misses the outbox")
	}
	t.Logf("%d hand-offs", handed)
}
