package queue

import (
	"container/heap"
	"math/rand"
	"slices"
	"testing"
	"unsafe"
)

// A held message is a pointer-free record of 48 bytes.
func TestHeld_RecordSize(t *testing.T) {
	if n := unsafe.Sizeof(heldRec{}); n != 48 {
		t.Fatalf("a held record is %d bytes", n)
	}
}

func pop(d *heldHeap) heldRec {
	heap.Pop(d)
	return d.out
}

func remove(d *heldHeap, i int) heldRec {
	heap.Remove(d, i)
	return d.out
}

// plainHeap is the heap on one plain slice, as the records were held
// before blocks.
type plainHeap []heldRec

func (p plainHeap) Len() int { return len(p) }
func (p plainHeap) Less(i, j int) bool {
	if p[i].due != p[j].due {
		return p[i].due < p[j].due
	}
	return p[i].seq < p[j].seq
}
func (p plainHeap) Swap(i, j int) { p[i], p[j] = p[j], p[i] }
func (p *plainHeap) Push(x any)   { *p = append(*p, x.(heldRec)) }
func (p *plainHeap) Pop() any {
	n := len(*p) - 1
	x := (*p)[n]
	*p = (*p)[:n]
	return x
}

// TestHeld_BlocksKeepHeapLayout: the heap in blocks holds its records
// at the positions a heap on one slice would, across block edges, through
// pushes, pops, removes and a filtered rebuild; truncating frees blocks.
func TestHeld_BlocksKeepHeapLayout(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	var held Held
	d := (*heldHeap)(&held)
	var p plainHeap
	seq := uint64(0)
	same := func(step int) {
		t.Helper()
		if d.h.n != len(p) {
			t.Fatalf("step %d: %d records, want %d", step, d.h.n, len(p))
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
			x := heldRec{due: int64(r.Intn(500)), seq: seq}
			d.h.push(nil, x)
			heap.Fix(d, d.h.n-1)
			heap.Push(&p, x)
		case k < 8:
			if got, want := pop(d), heap.Pop(&p).(heldRec); got != want {
				t.Fatalf("step %d: popped %v, want %v", step, got, want)
			}
		case k < 9:
			i := r.Intn(len(p))
			if got, want := remove(d, i), heap.Remove(&p, i).(heldRec); got != want {
				t.Fatalf("step %d: removed %v, want %v", step, got, want)
			}
		default:
			odd := func(x heldRec) bool { return x.seq%7 == 0 }
			w := 0
			for i := 0; i < d.h.n; i++ {
				if x := *d.h.at(i); !odd(x) {
					*d.h.at(w) = x
					w++
				}
			}
			d.h.truncate(w)
			p = slices.DeleteFunc(p, odd)
			heap.Init(d)
			heap.Init(&p)
		}
		if step%97 == 0 {
			same(step)
		}
	}
	same(-1)
	if d.h.n < 2*blockSize {
		t.Fatalf("only %d records: the blocks' edges are not crossed", d.h.n)
	}
	for len(p) > blockSize/2 {
		if got, want := pop(d), heap.Pop(&p).(heldRec); got != want {
			t.Fatalf("draining: popped %v, want %v", got, want)
		}
	}
	same(-2)
	if len(d.h.b) > 2 {
		t.Fatalf("%d blocks for %d records", len(d.h.b), d.h.n)
	}
	d.h.truncate(0)
	if len(d.h.b) != 0 {
		t.Fatalf("%d blocks left when empty", len(d.h.b))
	}
}
