package queue

import (
	"container/heap"
	"unsafe"

	"github.com/raftmq/raftmq/ttl"
)

// Held holds messages until a due time each: a min-heap on (due, seq) of
// pointer-free records in blocks, the storage of the delayed exchanges
// (fsm/apply_delayed.go). Like a Queue's lanes it keeps what messages
// share in a Table and what few have in a side map, so that a million
// held messages are nothing for the garbage collector to mark; each
// record also carries an aux value of the caller's (where the message
// waits).
//
// Its slice order is state: heap operations are deterministic, and a
// caller that writes the records in slice order (At) and reads them back
// with Append holds the same order as the one that wrote them, so every
// replica holds the same order whichever way it got there.
type Held struct {
	t     *Table
	h     heldBlocks
	extra map[uint64]rareRec // by seq
	// out is the record the last heap Pop took (Pop returns nil: a
	// record boxed in an interface would be an allocation per message).
	out heldRec
	// extraStamp is the epoch extra was made in (cow.go).
	extraStamp uint64
}

// heldRec is one held message: 48 bytes without a pointer. due is its
// due time, enq the time it was held, seq its place among the held
// messages (ties of one due time come out in that order).
type heldRec struct {
	due, enq   int64
	seq, index uint64 // index: Body.Index
	pos, size  uint32 // Body.Pos, Body.Size
	meta       uint32 // Table handle
	aux        uint32
}

// heldBlocks is the heap's slice of records, in blocks of blockSize (a
// lane's): a growing heap adds a block rather than copying itself, so
// that a million held messages leave no earlier, smaller copies resident.
type heldBlocks struct {
	b []hblk
	n int
}

// hblk is a block of held records and the epoch it was made in (blk).
type hblk struct {
	r     []heldRec
	epoch uint64
}

func (r *heldBlocks) at(i int) *heldRec { return &r.b[i>>blockBits].r[i&blockMask] }

// mut is at for a write: a block a live capture shares is cloned first.
func (r *heldBlocks) mut(c *cow, i int) *heldRec {
	if b := &r.b[i>>blockBits]; c.shared(b.epoch) {
		*b = hblk{r: append(make([]heldRec, 0, blockSize), b.r...), epoch: c.stamp()}
		c.count(blockSize*int64(unsafe.Sizeof(heldRec{})), true)
	}
	return r.at(i)
}

func (r *heldBlocks) push(c *cow, x heldRec) {
	if r.n>>blockBits == len(r.b) {
		r.b = append(r.b, hblk{r: make([]heldRec, blockSize), epoch: c.stamp()})
	}
	*r.mut(c, r.n) = x
	r.n++
}

// truncate keeps the first n records, freeing the blocks past the one
// after the last in use (one spare, so that a heap at a block's edge does
// not allocate and free it in turn).
func (r *heldBlocks) truncate(n int) {
	r.n = n
	keep := min((n+blockMask)>>blockBits+1, len(r.b))
	if n == 0 {
		keep = 0
	}
	clear(r.b[keep:])
	r.b = r.b[:keep]
}

// SetTable makes the heap keep the shared parts of its messages in t.
// Call it before the first push; without it the heap has a table of its
// own.
func (h *Held) SetTable(t *Table) { h.t = t }

// Len is the number of held messages.
func (h *Held) Len() int { return h.h.n }

// heap.Interface, on the records' slice.
type heldHeap Held

func (d *heldHeap) Len() int { return d.h.n }
func (d *heldHeap) Less(i, j int) bool {
	a, b := d.h.at(i), d.h.at(j)
	if a.due != b.due {
		return a.due < b.due
	}
	return a.seq < b.seq
}
func (d *heldHeap) Swap(i, j int) {
	c := (*Held)(d).cow()
	a, b := d.h.mut(c, i), d.h.mut(c, j)
	*a, *b = *b, *a
}
func (d *heldHeap) Push(any) { panic("queue.Held: push with Push") }
func (d *heldHeap) Pop() any {
	n := d.h.n - 1
	d.out = *d.h.at(n)
	d.h.truncate(n)
	return nil
}

// Less reports whether the message at position i comes out before the
// one at j.
func (h *Held) Less(i, j int) bool { return (*heldHeap)(h).Less(i, j) }

// record turns m into a held record, taking a reference to its shared
// part; what few messages have goes to the side map. m.Deadline is not
// read: a held message's time is its due time.
func (h *Held) record(m *Message, due int64, aux uint32) heldRec {
	if h.t == nil {
		h.t = &Table{}
	}
	r := heldRec{due: due, enq: m.Enqueued, seq: m.Seq, index: m.Body.Index, pos: m.Body.Pos, size: m.Body.Size,
		meta: h.t.intern(m), aux: aux}
	if rr, ok := rareOf(m); ok || m.Redelivered {
		rr.redelivered = m.Redelivered
		h.ownExtra()
		if h.extra == nil {
			h.extra = map[uint64]rareRec{}
		}
		h.extra[r.seq] = rr
	}
	return r
}

// Push holds m until due, in the heap's order; aux is the caller's.
func (h *Held) Push(m *Message, due int64, aux uint32) {
	r := h.record(m, due, aux)
	h.h.push(h.cow(), r)
	heap.Fix((*heldHeap)(h), h.h.n-1)
}

// Append puts m at the end of the slice without ordering it: a restore
// reads back, in order, the records that At gave to the snapshot.
func (h *Held) Append(m *Message, due int64, aux uint32) {
	r := h.record(m, due, aux)
	h.h.push(h.cow(), r)
}

// message sets m from r (m is overwritten). A held message has no
// deadline yet (ttl.NoDeadline): its due time is returned apart.
func (h *Held) message(r *heldRec, m *Message) {
	*m = Message{Body: Body{Index: r.index, Pos: r.pos, Size: r.size}, Enqueued: r.enq, Deadline: ttl.NoDeadline, Seq: r.seq}
	h.t.fill(m, r.meta)
	if rr, ok := h.extra[r.seq]; ok {
		rr.fill(m)
		m.Redelivered = rr.redelivered
	}
}

// forget drops what r holds beyond its heap slot.
func (h *Held) forget(r *heldRec) {
	h.t.release(r.meta)
	if h.extra != nil {
		h.ownExtra()
		delete(h.extra, r.seq)
		if len(h.extra) == 0 {
			h.extra = nil
		}
	}
}

// At sets m to the message at position i of the slice and returns its due
// time and aux, without changing the heap (m is overwritten).
func (h *Held) At(i int, m *Message) (due int64, aux uint32) {
	r := h.h.at(i)
	h.message(r, m)
	return r.due, r.aux
}

// Key returns the due time, sequence number and aux of the message at
// position i, without building it.
func (h *Held) Key(i int) (due int64, seq uint64, aux uint32) {
	r := h.h.at(i)
	return r.due, r.seq, r.aux
}

// Pop takes the earliest message out into m and returns its due time and
// aux.
func (h *Held) Pop(m *Message) (due int64, aux uint32) {
	heap.Pop((*heldHeap)(h))
	return h.take(m)
}

// Remove takes the message at position i out into m.
func (h *Held) Remove(i int, m *Message) (due int64, aux uint32) {
	heap.Remove((*heldHeap)(h), i)
	return h.take(m)
}

func (h *Held) take(m *Message) (int64, uint32) {
	r := h.out
	h.message(&r, m)
	h.forget(&r)
	return r.due, r.aux
}

// Drop removes every message whose aux drop selects, calling gone with
// each, and reorders the heap once if any went.
func (h *Held) Drop(drop func(aux uint32) bool, gone func(aux uint32)) {
	n := h.h.n
	if n == 0 {
		return
	}
	w := 0
	for i := 0; i < n; i++ {
		r := *h.h.at(i)
		if drop(r.aux) {
			h.forget(&r)
			gone(r.aux)
			continue
		}
		*h.h.mut(h.cow(), w) = r
		w++
	}
	h.h.truncate(w)
	if w != n {
		heap.Init((*heldHeap)(h))
	}
}
