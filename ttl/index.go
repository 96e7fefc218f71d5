package ttl

import (
	"maps"
	"slices"
)

// Index is an expiry index: a min-heap of (deadline, id) with O(log n)
// push, pop of the earliest, peek, remove by id and update by id, ordered by
// deadline then id so equal deadlines are taken in id order. The order in
// which entries leave never depends on the order in which they came in.
//
// Layout, for memory: the heap is a 4-ary heap in one slice of 16-byte
// entries (deadline, a 32-bit reference to the id's slot and 32 bits the
// caller may use, PushAux). Ids are
// grouped in pages of 32 consecutive ids; a page holds, per id, the id's
// position in the heap. Only pages holding at least one id exist, in one
// pointer-free arena the garbage collector never scans, and a small map
// finds a page by id/32. Ids a queue assigns in increasing order fill whole
// pages, so an entry costs about 16 + 4.5 bytes instead of a map entry per
// id, and moving an entry inside the heap never touches the map. Sparse ids
// cost more (up to one 144-byte page per entry when no two live ids share a
// page).
//
// The zero Index is empty and ready to use. An Index is not safe for
// concurrent use, and must not be copied once used (a copy shares storage).
type Index struct {
	heap  []entry
	dir   map[uint64]uint32 // id>>pageBits -> arena index of its page
	pages []page            // arena
	free  []uint32          // arena indexes of unused pages
}

const (
	arity    = 4
	pageBits = 5
	pageSize = 1 << pageBits
	pageMask = pageSize - 1
)

// entry is one heap element. ref is the arena index of the id's page
// shifted left by pageBits, or'ed with the id's offset in the page.
type entry struct {
	deadline int64
	ref      uint32
	aux      uint32 // the caller's, carried along (PushAux); 0 by Push
}

type page struct {
	base uint64           // id>>pageBits of every id on the page
	slot [pageSize]uint32 // heap position + 1; 0 when the id is absent
	n    uint32           // ids present
}

func (x *Index) id(ref uint32) uint64 {
	return x.pages[ref>>pageBits].base<<pageBits | uint64(ref&pageMask)
}

// before orders entries by deadline, then id.
func (x *Index) before(a, b entry) bool {
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	if a.ref>>pageBits == b.ref>>pageBits { // same page: compare offsets
		return a.ref < b.ref
	}
	return x.id(a.ref) < x.id(b.ref)
}

// place puts e at heap position i and records the position.
func (x *Index) place(i int, e entry) {
	x.heap[i] = e
	x.pages[e.ref>>pageBits].slot[e.ref&pageMask] = uint32(i) + 1
}

// lookup returns the heap position of id.
func (x *Index) lookup(id uint64) (int, bool) {
	p, ok := x.dir[id>>pageBits]
	if !ok {
		return 0, false
	}
	s := x.pages[p].slot[id&pageMask]
	return int(s) - 1, s != 0
}

// Len returns the number of entries.
func (x *Index) Len() int { return len(x.heap) }

// Push adds id with its deadline. Pushing an id that is already present
// moves it to the new deadline (like Update).
func (x *Index) Push(id uint64, deadline int64) { x.PushAux(id, deadline, 0) }

// PushAux is Push with a 32-bit value of the caller's kept with the entry
// (PopDueAux returns it), which costs nothing: it fills the entry's
// padding.
func (x *Index) PushAux(id uint64, deadline int64, aux uint32) {
	key := id >> pageBits
	p, ok := x.dir[key]
	if ok {
		if s := x.pages[p].slot[id&pageMask]; s != 0 {
			x.heap[s-1].aux = aux
			x.set(int(s)-1, deadline)
			return
		}
	} else {
		p = x.alloc(key)
	}
	x.pages[p].n++
	e := entry{deadline: deadline, ref: p<<pageBits | uint32(id&pageMask), aux: aux}
	x.heap = append(x.heap, e)
	x.up(len(x.heap)-1, e)
}

// Remove deletes id and reports whether it was present.
func (x *Index) Remove(id uint64) bool {
	i, ok := x.lookup(id)
	if !ok {
		return false
	}
	x.removeAt(i)
	return true
}

// Update moves id to a new deadline and reports whether it was present (an
// absent id is not added).
func (x *Index) Update(id uint64, deadline int64) bool {
	i, ok := x.lookup(id)
	if !ok {
		return false
	}
	x.set(i, deadline)
	return true
}

// Get returns the deadline of id and whether it is present.
func (x *Index) Get(id uint64) (deadline int64, ok bool) {
	i, ok := x.lookup(id)
	if !ok {
		return 0, false
	}
	return x.heap[i].deadline, true
}

// Peek returns the earliest entry (lowest deadline, then lowest id) without
// removing it; ok is false when the index is empty.
func (x *Index) Peek() (id uint64, deadline int64, ok bool) {
	if len(x.heap) == 0 {
		return 0, 0, false
	}
	return x.id(x.heap[0].ref), x.heap[0].deadline, true
}

// PopDue pops every entry with deadline <= now in (deadline, id) order,
// calls fn (when not nil) with each after it has left the index, and returns
// how many it popped. fn may Push, Remove or Update; an entry it pushes with
// a deadline <= now is popped in the same call.
func (x *Index) PopDue(now int64, fn func(id uint64, deadline int64)) int {
	if fn == nil {
		return x.PopDueAux(now, nil)
	}
	return x.PopDueAux(now, func(id uint64, deadline int64, _ uint32) { fn(id, deadline) })
}

// PopDueAux is PopDue, giving fn each entry's aux value too.
func (x *Index) PopDueAux(now int64, fn func(id uint64, deadline int64, aux uint32)) int {
	n := 0
	for len(x.heap) > 0 && x.heap[0].deadline <= now {
		e := x.heap[0]
		id := x.id(e.ref)
		x.removeAt(0)
		n++
		if fn != nil {
			fn(id, e.deadline, e.aux)
		}
	}
	return n
}

// CountDue returns how many entries have a deadline <= now, visiting only
// those and their children: O(due), not O(Len).
func (x *Index) CountDue(now int64) int {
	if len(x.heap) == 0 || x.heap[0].deadline > now {
		return 0
	}
	n := 0
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n++
		for c := arity*i + 1; c < min(arity*i+1+arity, len(x.heap)); c++ {
			if x.heap[c].deadline <= now {
				stack = append(stack, c)
			}
		}
	}
	return n
}

// Clone returns a copy of x that shares no storage with it: a copy of
// the struct shares x's (the type comment), which a reader may keep while
// the owner goes on in the clone (queue's snapshot captures).
func (x *Index) Clone() Index {
	return Index{heap: slices.Clone(x.heap), dir: maps.Clone(x.dir), pages: slices.Clone(x.pages), free: slices.Clone(x.free)}
}

// Reset empties the index and releases its memory.
func (x *Index) Reset() { *x = Index{} }

// set gives the entry at heap position i a new deadline and restores the
// heap order.
func (x *Index) set(i int, deadline int64) {
	e := x.heap[i]
	old := e.deadline
	e.deadline = deadline
	if deadline < old {
		x.up(i, e)
	} else {
		x.down(i, e)
	}
}

// removeAt deletes the entry at heap position i.
func (x *Index) removeAt(i int) {
	ref := x.heap[i].ref
	last := len(x.heap) - 1
	e := x.heap[last]
	x.heap = x.heap[:last]
	if i < last {
		if i > 0 && x.before(e, x.heap[(i-1)/arity]) {
			x.up(i, e)
		} else {
			x.down(i, e)
		}
	}
	x.release(ref)
	if last == 0 {
		x.Reset() // empty: give everything back
		return
	}
	if c := cap(x.heap); c > 1024 && len(x.heap) < c/4 {
		x.heap = append(make([]entry, 0, len(x.heap)*2), x.heap...)
	}
}

// up fills the hole at heap position i with e, moving parents down while e
// sorts before them.
func (x *Index) up(i int, e entry) {
	for i > 0 {
		p := (i - 1) / arity
		if !x.before(e, x.heap[p]) {
			break
		}
		x.place(i, x.heap[p])
		i = p
	}
	x.place(i, e)
}

// down fills the hole at heap position i with e, moving the least child up
// while it sorts before e.
func (x *Index) down(i int, e entry) {
	h := x.heap
	n := len(h)
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < min(c+arity, n); j++ {
			if x.before(h[j], h[m]) {
				m = j
			}
		}
		if !x.before(h[m], e) {
			break
		}
		x.place(i, h[m])
		i = m
	}
	x.place(i, e)
}

// alloc returns the arena index of a new empty page for ids key<<pageBits..
func (x *Index) alloc(key uint64) uint32 {
	var p uint32
	if n := len(x.free); n > 0 {
		p = x.free[n-1]
		x.free = x.free[:n-1]
		x.pages[p] = page{base: key}
	} else {
		p = uint32(len(x.pages))
		x.pages = append(x.pages, page{base: key})
	}
	if x.dir == nil {
		x.dir = make(map[uint64]uint32)
	}
	x.dir[key] = p
	return p
}

// release clears the slot of ref, freeing its page when it empties.
func (x *Index) release(ref uint32) {
	p := ref >> pageBits
	pg := &x.pages[p]
	pg.slot[ref&pageMask] = 0
	pg.n--
	if pg.n > 0 {
		return
	}
	delete(x.dir, pg.base)
	x.free = append(x.free, p)
	if len(x.free) >= 256 && 2*len(x.free) > len(x.pages) {
		x.compact()
	}
}

// compact moves the pages in use to a new arena in heap order, rewrites the
// references and rebuilds the directory, so memory held by freed pages (and
// by a map that only grew) goes back. It costs O(Len) and runs only when
// more than half the arena is free, so its cost is amortised over at least
// as many page releases.
func (x *Index) compact() {
	remap := make([]uint32, len(x.pages)) // old index -> new index + 1
	pages := make([]page, 0, len(x.pages)-len(x.free))
	for i := range x.heap {
		e := &x.heap[i]
		old := e.ref >> pageBits
		if remap[old] == 0 {
			pages = append(pages, x.pages[old])
			remap[old] = uint32(len(pages))
		}
		e.ref = (remap[old]-1)<<pageBits | e.ref&pageMask
	}
	x.pages = pages
	x.free = nil
	x.dir = make(map[uint64]uint32, len(pages))
	for i := range pages {
		x.dir[pages[i].base] = uint32(i)
	}
}
