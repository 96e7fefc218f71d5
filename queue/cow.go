package queue

import (
	"maps"
	"sync/atomic"
	"unsafe"

	"github.com/raftmq/raftmq/ttl"
)

// Capture and copy on write: a snapshot reads the records as they were at
// its capture while the state machine goes on changing them. Capture
// (Table.Capture, Queue.Capture, Held.Capture) costs the apply goroutine
// a copy of each lane's and heap's list of blocks, not of the records;
// what the state changes after it, it changes in storage of its own:
//
//   - a block of records carries the epoch it was made in; one made
//     before the last capture, while a capture lives, is shared, and a
//     write into it (a dead mark, a requeue at the head, a heap move)
//     clones it first. Appending past a block's length writes where no
//     capture reads, and a shared block is never shortened, so a FIFO's
//     publishes and deliveries clone nothing;
//   - a queue's expiry index and side map, and a heap's side map, are
//     cloned whole at their first change after a capture (their size is
//     that of the messages with a deadline, or with a return, a failure,
//     an inline body: few in a backlog);
//   - a block a lane drops while a live capture may read it is freed
//     when none lives (slab.go);
//   - the Table frees no entry while a capture lives (a freed entry would
//     be reused for another message's properties): the entries whose last
//     reference went wait in pending until the last capture is released.
//     Its entries are written in place, but only their counts, which a
//     capture never reads.
//
// Release may come from any goroutine (raft releases a snapshot on its
// own); everything else runs on the goroutine that owns the state.
type cow struct {
	epoch   uint64       // captures taken; a block stamped below is shared while one lives
	live    atomic.Int64 // captures not released
	pending []uint32     // table entries to free once no capture lives
	dropped []blk        // slab blocks to free once no capture lives (slab.go)
	slabs   *slabs
	// copied counts the blocks cloned and the bytes copied for captures
	// (Table.Copied).
	copied struct {
		blocks int
		bytes  int64
	}
}

// count counts a copy of n bytes, a block's when block.
func (c *cow) count(n int64, block bool) {
	if block {
		c.copied.blocks++
	}
	c.copied.bytes += n
}

// Copied is what the tables' users copied because a capture shared it:
// the record blocks cloned and the bytes copied (blocks, expiry indexes,
// side maps), since the table was made (benchmarks).
func (t *Table) Copied() (blocks int, bytes int64) {
	if t.cow == nil {
		return 0, 0
	}
	return t.cow.copied.blocks, t.cow.copied.bytes
}

// shared reports whether storage stamped with epoch may be read by a
// live capture.
func (c *cow) shared(stamp uint64) bool {
	return c != nil && stamp < c.epoch && c.live.Load() > 0
}

// stamp is the epoch new or cloned storage is stamped with.
func (c *cow) stamp() uint64 {
	if c == nil {
		return 0
	}
	return c.epoch
}

// Capture is a point in a state's history that views (Queue.Capture,
// Held.Capture) read from. It must be released once they are read.
type Capture struct {
	t    *Table
	c    *cow
	done atomic.Bool
}

// Capture starts a capture of the records that use t: the views taken
// from it until the next change read the state as it is now. Release it
// when they are read; until then the storage they share is copied on
// write.
func (t *Table) Capture() *Capture {
	c := t.cowState()
	t.settle()
	c.epoch++
	c.live.Add(1)
	return &Capture{t: t, c: c}
}

// Release ends the capture: its views must not be read after. It may be
// called from any goroutine, more than once.
func (cp *Capture) Release() {
	if cp != nil && cp.done.CompareAndSwap(false, true) {
		cp.c.live.Add(-1)
	}
}

func (t *Table) cowState() *cow {
	if t.cow == nil {
		t.cow = &cow{slabs: newSlabs()}
		freeOnCollect(t, t.cow.slabs)
	}
	return t.cow
}

// settle frees the entries whose last reference went while a capture
// lived, once none does.
func (t *Table) settle() {
	c := t.cow
	if c == nil || c.live.Load() > 0 {
		return
	}
	c.settleBlocks()
	if len(c.pending) == 0 {
		return
	}
	pending := c.pending
	c.pending = nil
	for _, h := range pending {
		// A freed entry's key is empty (no key is: keyOf writes at least
		// its lengths); a reset table has no entries left.
		if int(h) >= len(t.entries) {
			continue
		}
		if e := &t.entries[h]; e.refs == 0 && e.key != "" {
			t.free1(h)
		}
	}
}

// view is a capture's copy of a table: the entries live when it was
// taken, which keep their keys while it lives.
func (t *Table) view() []meta { return t.entries }

// QueueView is a queue's ready messages as they were at a capture.
type QueueView struct {
	entries []meta
	lanes   []laneView
	index   ttl.Index
	rare    map[uint64]rareRec
	n       int
}

type laneView struct {
	blocks  []blk
	head, n int
}

// Capture returns a view of the ready messages now, for cp.
func (q *Queue) Capture(cp *Capture) *QueueView {
	if q.t == nil {
		q.t = cp.t // nothing pushed yet
	}
	if q.t != cp.t {
		panic("queue: a queue captured by another table's capture")
	}
	// The index is copied as a value: it shares the queue's storage,
	// which the queue clones before its next change (ownSide).
	v := &QueueView{entries: q.t.view(), rare: q.rare, n: q.count, index: q.index}
	for p := range q.lanes {
		l := &q.lanes[p]
		v.lanes = append(v.lanes, laneView{blocks: append([]blk(nil), l.blocks...), head: l.head, n: l.n})
	}
	return v
}

// Len is the number of messages in the view.
func (v *QueueView) Len() int { return v.n }

// Each calls fn with each message of the view in delivery order (as
// Queue.Each did at the capture). m is valid during the call only.
func (v *QueueView) Each(fn func(m *Message)) {
	var m Message
	for p := len(v.lanes) - 1; p >= 0; p-- {
		l := &v.lanes[p]
		for i := 0; i < l.n; i++ {
			a := l.head + i
			r := &l.blocks[a>>blockBits].r[a&blockMask]
			if r.flags&fDead != 0 {
				continue
			}
			m = Message{Body: Body{Index: r.index, Pos: r.pos, Size: r.size}, Enqueued: r.enq, Deadline: ttl.NoDeadline,
				Seq: r.seq, Redelivered: r.flags&fRedelivered != 0}
			fillFrom(v.entries, &m, r.meta)
			if r.flags&fTimed != 0 {
				m.Deadline, _ = v.index.Get(r.seq)
			}
			if r.flags&fRare != 0 {
				rr := v.rare[r.seq]
				rr.fill(&m)
			}
			fn(&m)
		}
	}
}

// ownSide makes the queue's expiry index and side map its own before a
// change, when a live capture shares them.
func (q *Queue) ownSide() {
	c := q.cow()
	if !c.shared(q.sideStamp) {
		return
	}
	q.index = q.index.Clone()
	q.rare = maps.Clone(q.rare)
	q.sideStamp = c.epoch
	c.count(int64(q.index.Len())*20+int64(len(q.rare))*int64(unsafe.Sizeof(rareRec{})+8), false)
}

// HeldView is a Held's messages as they were at a capture, in slice
// order.
type HeldView struct {
	entries []meta
	blocks  []hblk
	n       int
	extra   map[uint64]rareRec
}

// Capture returns a view of the held messages now, for cp.
func (h *Held) Capture(cp *Capture) *HeldView {
	if h.t == nil {
		h.t = cp.t // nothing pushed yet
	}
	if h.t != cp.t {
		panic("queue: a heap captured by another table's capture")
	}
	return &HeldView{entries: h.t.view(), blocks: append([]hblk(nil), h.h.b...), n: h.h.n, extra: h.extra}
}

// Len is the number of messages in the view.
func (v *HeldView) Len() int { return v.n }

// At is Held.At at the capture.
func (v *HeldView) At(i int, m *Message) (due int64, aux uint32) {
	r := &v.blocks[i>>blockBits].r[i&blockMask]
	*m = Message{Body: Body{Index: r.index, Pos: r.pos, Size: r.size}, Enqueued: r.enq, Deadline: ttl.NoDeadline, Seq: r.seq}
	fillFrom(v.entries, m, r.meta)
	if rr, ok := v.extra[r.seq]; ok {
		rr.fill(m)
		m.Redelivered = rr.redelivered
	}
	return r.due, r.aux
}

// ownExtra makes the heap's side map its own before a change, when a
// live capture shares it.
func (h *Held) ownExtra() {
	if c := h.cow(); c.shared(h.extraStamp) {
		h.extra = maps.Clone(h.extra)
		h.extraStamp = c.epoch
		c.count(int64(len(h.extra))*int64(unsafe.Sizeof(rareRec{})+8), false)
	}
}

func (q *Queue) cow() *cow {
	if q.t == nil {
		return nil
	}
	return q.t.cow
}

func (h *Held) cow() *cow {
	if h.t == nil {
		return nil
	}
	return h.t.cow
}
