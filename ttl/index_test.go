package ttl

import (
	"math/rand"
	"slices"
	"testing"
)

// The design's sentences the index serves:
const (
	designExact = `DESIGN: "Each queue keeps an expiry index (min-heap or ordered structure on deadline), so a short-TTL message behind a long-TTL one dies on time"`
	designOrder = `DESIGN: "Applying it at stamp T removes every message of that queue whose deadline is <= T, in deadline order"`
	designSeed0 = `seeds/000: "a message routed to multiple queues can die at different times ... in each queue in which it resides"`
)

type pair struct {
	id       uint64
	deadline int64
}

func drain(x *Index, now int64) []pair {
	var out []pair
	x.PopDue(now, func(id uint64, d int64) { out = append(out, pair{id, d}) })
	return out
}

func TestIndexOrder(t *testing.T) {
	var x Index
	if _, _, ok := x.Peek(); ok {
		t.Fatal("empty index peeks an entry")
	}
	// A long TTL pushed first, shorter ones after: the short ones leave
	// first (designExact), equal deadlines in id order whatever the push
	// order (designOrder).
	x.Push(1, 60000)
	x.Push(9, 100)
	x.Push(4, 100)
	x.Push(7, 50)
	x.Push(2, 100)
	if x.Len() != 5 {
		t.Fatalf("Len = %d, want 5", x.Len())
	}
	if id, d, ok := x.Peek(); !ok || id != 7 || d != 50 {
		t.Fatalf("Peek = %d, %d, %v; want 7, 50", id, d, ok)
	}
	if got := drain(&x, 99); !slices.Equal(got, []pair{{7, 50}}) {
		t.Fatalf("PopDue(99) = %v", got)
	}
	if got := drain(&x, 100); !slices.Equal(got, []pair{{2, 100}, {4, 100}, {9, 100}}) {
		t.Fatalf("%s: PopDue(100) = %v", designOrder, got)
	}
	if n := x.PopDue(59999, nil); n != 0 {
		t.Fatalf("PopDue before the deadline popped %d", n)
	}
	if n := x.PopDue(60000, nil); n != 1 || x.Len() != 0 {
		t.Fatalf("PopDue at the deadline popped %d, left %d", n, x.Len())
	}
}

func TestIndexRemoveUpdate(t *testing.T) {
	var x Index
	for id := uint64(1); id <= 10; id++ {
		x.Push(id, int64(id*10))
	}
	if !x.Remove(1) || x.Remove(1) || x.Remove(42) {
		t.Fatal("Remove reports presence wrongly")
	}
	if !x.Update(10, 5) || x.Update(42, 5) {
		t.Fatal("Update reports presence wrongly")
	}
	if _, ok := x.Get(42); ok {
		t.Fatal("Update added an absent id")
	}
	if d, ok := x.Get(10); !ok || d != 5 {
		t.Fatalf("Get(10) = %d, %v", d, ok)
	}
	if !x.Update(2, 1000) { // later
		t.Fatal("Update(2) absent")
	}
	x.Push(3, 20) // re-push moves like Update: 30 -> 20
	if x.Len() != 9 {
		t.Fatalf("Len = %d, want 9", x.Len())
	}
	got := drain(&x, 1<<40)
	want := []pair{{10, 5}, {3, 20}, {4, 40}, {5, 50}, {6, 60}, {7, 70}, {8, 80}, {9, 90}, {2, 1000}}
	if !slices.Equal(got, want) {
		t.Fatalf("%s\n got %v\nwant %v", designOrder, got, want)
	}
}

func TestIndexPopDueCallbackMayChangeIndex(t *testing.T) {
	var x Index
	x.Push(1, 10)
	x.Push(2, 20)
	x.Push(3, 30)
	var got []uint64
	x.PopDue(25, func(id uint64, _ int64) {
		got = append(got, id)
		if id == 1 {
			x.Remove(3)   // drop a later one
			x.Push(4, 15) // due now: popped in this call
			x.Push(5, 99) // not due
		}
	})
	if !slices.Equal(got, []uint64{1, 4, 2}) || x.Len() != 1 {
		t.Fatalf("got %v, left %d", got, x.Len())
	}
}

func TestIndexEqualDeadlinesInIDOrder(t *testing.T) {
	// designOrder with every deadline equal: PopDue gives ids sorted,
	// whatever order they were pushed in.
	rng := rand.New(rand.NewSource(7))
	ids := rng.Perm(500)
	var x Index
	for _, id := range ids {
		x.Push(uint64(id), 1000)
	}
	var got []uint64
	x.PopDue(1000, func(id uint64, _ int64) { got = append(got, id) })
	for i, id := range got {
		if id != uint64(i) {
			t.Fatalf("position %d: id %d", i, id)
		}
	}
	if len(got) != 500 {
		t.Fatalf("popped %d, want 500", len(got))
	}
}

// TestIndexAgainstModel drives an Index and a sorted-slice model with the
// same random operations and compares them after every step.
func TestIndexAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewSource(20261122))
	var x Index
	model := map[uint64]int64{}
	sorted := func() []pair {
		out := make([]pair, 0, len(model))
		for id, d := range model {
			out = append(out, pair{id, d})
		}
		slices.SortFunc(out, func(a, b pair) int {
			if a.deadline != b.deadline {
				if a.deadline < b.deadline {
					return -1
				}
				return 1
			}
			if a.id < b.id {
				return -1
			}
			if a.id > b.id {
				return 1
			}
			return 0
		})
		return out
	}
	nextID := uint64(1)
	now := int64(0)
	for step := range 20000 {
		// Ids are mostly increasing, with reuse of old ones (requeue) and
		// some far-away ones; deadlines cluster so ties are common.
		var id uint64
		switch r := rng.Intn(10); {
		case r < 6:
			id = nextID
			nextID += uint64(1 + rng.Intn(3))
		case r < 9:
			id = uint64(1 + rng.Int63n(int64(nextID)))
		default:
			id = uint64(rng.Int63())
		}
		deadline := now + int64(rng.Intn(50))
		switch op := rng.Intn(10); {
		case op < 5:
			x.Push(id, deadline)
			model[id] = deadline
		case op < 7:
			_, had := model[id]
			if x.Remove(id) != had {
				t.Fatalf("step %d: Remove(%d) presence mismatch", step, id)
			}
			delete(model, id)
		case op < 8:
			_, had := model[id]
			if x.Update(id, deadline) != had {
				t.Fatalf("step %d: Update(%d) presence mismatch", step, id)
			}
			if had {
				model[id] = deadline
			}
		default:
			now += int64(rng.Intn(20))
			want := sorted()
			cut := 0
			for cut < len(want) && want[cut].deadline <= now {
				cut++
			}
			got := drain(&x, now)
			if !slices.Equal(got, want[:cut]) {
				t.Fatalf("step %d: PopDue(%d)\n got %v\nwant %v", step, now, got, want[:cut])
			}
			for _, p := range got {
				delete(model, p.id)
			}
		}
		if x.Len() != len(model) {
			t.Fatalf("step %d: Len %d, model %d", step, x.Len(), len(model))
		}
		if len(model) > 0 {
			w := sorted()[0]
			id, d, ok := x.Peek()
			if !ok || id != w.id || d != w.deadline {
				t.Fatalf("step %d: Peek = %d,%d,%v; want %v", step, id, d, ok, w)
			}
		}
		if step%1000 == 0 {
			for id, d := range model {
				if got, ok := x.Get(id); !ok || got != d {
					t.Fatalf("step %d: Get(%d) = %d,%v; want %d", step, id, got, ok, d)
				}
			}
		}
	}
	got := drain(&x, 1<<62)
	if !slices.Equal(got, sorted()) {
		t.Fatal("final drain differs from the model")
	}
}

func TestIndexDeterministic(t *testing.T) {
	// designSeed0 and the house rule: two replicas building the index in
	// different orders expire the same ids in the same order.
	rng := rand.New(rand.NewSource(3))
	var ps []pair
	for i := range 2000 {
		ps = append(ps, pair{uint64(i), int64(rng.Intn(100))})
	}
	var a, b Index
	for _, p := range ps {
		a.Push(p.id, p.deadline)
	}
	for _, i := range rng.Perm(len(ps)) {
		b.Push(ps[i].id, ps[i].deadline)
	}
	for now := int64(0); now < 100; now += 7 {
		if ga, gb := drain(&a, now), drain(&b, now); !slices.Equal(ga, gb) {
			t.Fatalf("%s: now %d: replicas differ", designSeed0, now)
		}
	}
}

func TestIndexReleasesMemory(t *testing.T) {
	var x Index
	for id := range uint64(100000) {
		x.Push(id, int64(id))
	}
	x.PopDue(99990, nil)
	if x.Len() != 9 {
		t.Fatalf("Len = %d", x.Len())
	}
	if c := cap(x.heap); c > 2048 {
		t.Fatalf("heap capacity %d kept after draining to %d entries", c, x.Len())
	}
	if n := len(x.pages); n > 512 {
		t.Fatalf("%d id pages kept for %d entries", n, x.Len())
	}
	x.Reset()
	if x.Len() != 0 {
		t.Fatal("Reset left entries")
	}
	x.Push(5, 5)
	if id, _, ok := x.Peek(); !ok || id != 5 {
		t.Fatal("index unusable after Reset")
	}
}

func TestIndexSparseRemovalCompacts(t *testing.T) {
	// DESIGN: the index "frees its memory" as messages die. Removing all
	// but one id in every page, in random order, must keep every survivor
	// and its deadline, and give most pages back.
	rng := rand.New(rand.NewSource(11))
	const n = 64 * 1024
	var x Index
	for _, id := range rng.Perm(n) {
		x.Push(uint64(id), int64(id%97))
	}
	for _, id := range rng.Perm(n) {
		if id%pageSize != 0 && id%3 != 0 {
			x.Remove(uint64(id))
		}
	}
	want := map[uint64]int64{}
	for id := 0; id < n; id++ {
		if id%pageSize == 0 || id%3 == 0 {
			want[uint64(id)] = int64(id % 97)
		}
	}
	if x.Len() != len(want) {
		t.Fatalf("Len %d, want %d", x.Len(), len(want))
	}
	for id, d := range want {
		if got, ok := x.Get(id); !ok || got != d {
			t.Fatalf("Get(%d) = %d, %v; want %d", id, got, ok, d)
		}
	}
	if live := n / pageSize; len(x.pages) > 2*live || len(x.free) > live {
		t.Fatalf("%d pages (%d free) for %d live pages", len(x.pages), len(x.free), live)
	}
	// Now leave one id per page: the arena shrinks again.
	for id := range want {
		if id%pageSize != 0 {
			x.Remove(id)
			delete(want, id)
		}
	}
	if len(x.pages) > 2*len(want) {
		t.Fatalf("%d pages for %d ids, one per page", len(x.pages), len(want))
	}
	prev := pair{}
	got := drain(&x, 1<<40)
	for i, p := range got {
		if want[p.id] != p.deadline {
			t.Fatalf("popped %v, want deadline %d", p, want[p.id])
		}
		if i > 0 && (p.deadline < prev.deadline || p.deadline == prev.deadline && p.id <= prev.id) {
			t.Fatalf("out of order: %v after %v", p, prev)
		}
		prev = p
	}
	if len(got) != len(want) {
		t.Fatalf("popped %d, want %d", len(got), len(want))
	}
}

// PushAux keeps the caller's value with the entry, PopDueAux returns it,
// and CountDue counts what PopDue would pop without popping it.
func TestIndex_AuxAndCountDue(t *testing.T) {
	var x Index
	r := rand.New(rand.NewSource(1))
	want := map[uint64]uint32{}
	dl := map[uint64]int64{}
	for id := uint64(0); id < 2000; id++ {
		d := int64(r.Intn(1000))
		x.PushAux(id, d, uint32(id*7))
		want[id], dl[id] = uint32(id*7), d
	}
	x.PushAux(5, 2000, 99) // moves, with a new aux
	want[5], dl[5] = 99, 2000
	for _, now := range []int64{-1, 0, 100, 500, 999, 5000} {
		n := 0
		for _, d := range dl {
			if d <= now {
				n++
			}
		}
		if got := x.CountDue(now); got != n {
			t.Fatalf("CountDue(%d) = %d, want %d", now, got, n)
		}
	}
	popped := x.PopDueAux(999, func(id uint64, d int64, aux uint32) {
		if aux != want[id] || d != dl[id] {
			t.Fatalf("id %d: aux %d deadline %d, want %d %d", id, aux, d, want[id], dl[id])
		}
	})
	if popped != 1999 || x.Len() != 1 || x.CountDue(1999) != 0 || x.CountDue(2000) != 1 {
		t.Fatalf("popped %d, left %d", popped, x.Len())
	}
}
