package ttl

// Index is an expiry index: a min-heap of (deadline, id) with O(log n)
// push, pop of the earliest, peek, remove by id and update by id, ordered by
// deadline then id so equal deadlines are taken in id order. The order in
// which entries leave never depends on the order in which they came in.
//
// It is a 4-ary heap in one slice of 16-byte entries plus a position table
// from id to heap slot. The zero Index is empty and ready to use. An Index
// is not safe for concurrent use.
type Index struct {
	heap []entry
	pos  posTable
}

type entry struct {
	deadline int64
	id       uint64
}

func (a entry) before(b entry) bool {
	return a.deadline < b.deadline || (a.deadline == b.deadline && a.id < b.id)
}

const arity = 4

// Len returns the number of entries.
func (x *Index) Len() int { return len(x.heap) }

// Push adds id with its deadline. Pushing an id that is already present
// moves it to the new deadline (like Update).
func (x *Index) Push(id uint64, deadline int64) {
	if i, ok := x.pos.get(id); ok {
		x.set(i, deadline)
		return
	}
	x.heap = append(x.heap, entry{deadline: deadline, id: id})
	x.up(len(x.heap)-1, entry{deadline: deadline, id: id})
}

// Remove deletes id and reports whether it was present.
func (x *Index) Remove(id uint64) bool {
	i, ok := x.pos.get(id)
	if !ok {
		return false
	}
	x.removeAt(i)
	return true
}

// Update moves id to a new deadline and reports whether it was present (an
// absent id is not added).
func (x *Index) Update(id uint64, deadline int64) bool {
	i, ok := x.pos.get(id)
	if !ok {
		return false
	}
	x.set(i, deadline)
	return true
}

// Get returns the deadline of id and whether it is present.
func (x *Index) Get(id uint64) (deadline int64, ok bool) {
	i, ok := x.pos.get(id)
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
	return x.heap[0].id, x.heap[0].deadline, true
}

// PopDue pops every entry with deadline <= now in (deadline, id) order,
// calls fn (when not nil) with each after it has left the index, and returns
// how many it popped. fn may Push, Remove or Update; an entry it pushes with
// a deadline <= now is popped in the same call.
func (x *Index) PopDue(now int64, fn func(id uint64, deadline int64)) int {
	n := 0
	for len(x.heap) > 0 && x.heap[0].deadline <= now {
		e := x.heap[0]
		x.removeAt(0)
		n++
		if fn != nil {
			fn(e.id, e.deadline)
		}
	}
	return n
}

// Reset empties the index and releases its memory.
func (x *Index) Reset() { *x = Index{} }

// set gives the entry in slot i a new deadline and restores the heap order.
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

// removeAt deletes the entry in slot i.
func (x *Index) removeAt(i int) {
	last := len(x.heap) - 1
	x.pos.del(x.heap[i].id)
	e := x.heap[last]
	x.heap = x.heap[:last]
	if i < last {
		if i > 0 && e.before(x.heap[(i-1)/arity]) {
			x.up(i, e)
		} else {
			x.down(i, e)
		}
	}
	x.shrink()
}

// up places e in the hole at slot i, moving parents down while e sorts
// before them.
func (x *Index) up(i int, e entry) {
	h := x.heap
	for i > 0 {
		p := (i - 1) / arity
		if !e.before(h[p]) {
			break
		}
		h[i] = h[p]
		x.pos.set(h[i].id, i)
		i = p
	}
	h[i] = e
	x.pos.set(e.id, i)
}

// down places e in the hole at slot i, moving the smallest child up while it
// sorts before e.
func (x *Index) down(i int, e entry) {
	h := x.heap
	n := len(h)
	for {
		c := arity*i + 1
		if c >= n {
			break
		}
		m := c
		end := min(c+arity, n)
		for j := c + 1; j < end; j++ {
			if h[j].before(h[m]) {
				m = j
			}
		}
		if !h[m].before(e) {
			break
		}
		h[i] = h[m]
		x.pos.set(h[i].id, i)
		i = m
	}
	h[i] = e
	x.pos.set(e.id, i)
}

// shrink gives memory back once the heap uses under a quarter of its
// capacity.
func (x *Index) shrink() {
	if c := cap(x.heap); c > 1024 && len(x.heap) < c/4 {
		x.heap = append(make([]entry, 0, len(x.heap)*2), x.heap...)
	}
}
