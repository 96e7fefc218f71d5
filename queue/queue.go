package queue

import (
	"cmp"
	"slices"

	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

// Message is one queued copy of a published message. The body slice is
// shared between the queues a publish fans out to and is never modified.
type Message struct {
	Exchange    string
	RoutingKey  string
	Properties  *proto.Properties
	Body        []byte
	BCC         []string // BCC routing keys (removed from the properties), for dead-lettering
	Enqueued    int64    // log stamp of the enqueue (ms)
	Deadline    int64    // in this queue; ttl.NoDeadline when none
	MsgTTL      int64    // per-message expiration (ms), -1 when none
	Seq         uint64
	Redelivered bool
	slot        int32 // position in the slab, -1 when not ready
}

// Queued reports whether a message that was pushed is still ready.
func (m *Message) Queued() bool { return m.slot >= 0 }

// Size is the byte size counted by x-max-length-bytes (the body).
func (m *Message) Size() int64 { return int64(len(m.Body)) }

// Queue holds the ready messages of one queue in FIFO order with an expiry
// index over them. It is deterministic and not safe for concurrent use.
type Queue struct {
	ready []*Message // ring buffer contents from head; nil = removed
	head  int
	count int
	bytes int64
	slab  []*Message // slot -> message, for the expiry index
	free  []int32
	index ttl.Index
	seq   uint64
}

// Len is the number of ready messages.
func (q *Queue) Len() int { return q.count }

// Bytes is the total body size of the ready messages.
func (q *Queue) Bytes() int64 { return q.bytes }

// NextSeq returns a fresh sequence number for a message of this queue.
func (q *Queue) NextSeq() uint64 { q.seq++; return q.seq }

// Seq is the last sequence number handed out.
func (q *Queue) Seq() uint64 { return q.seq }

// SetSeq restores the sequence counter.
func (q *Queue) SetSeq(s uint64) { q.seq = s }

func (q *Queue) track(m *Message) {
	var s int32
	if n := len(q.free); n > 0 {
		s = q.free[n-1]
		q.free = q.free[:n-1]
		q.slab[s] = m
	} else {
		s = int32(len(q.slab))
		q.slab = append(q.slab, m)
	}
	m.slot = s
	q.count++
	q.bytes += m.Size()
	if m.Deadline != ttl.NoDeadline {
		q.index.Push(uint64(s), m.Deadline)
	}
}

func (q *Queue) untrack(m *Message) {
	if m.Deadline != ttl.NoDeadline {
		q.index.Remove(uint64(m.slot))
	}
	q.slab[m.slot] = nil
	q.free = append(q.free, m.slot)
	m.slot = -1
	q.count--
	q.bytes -= m.Size()
}

// PushBack appends a ready message.
func (q *Queue) PushBack(m *Message) {
	q.track(m)
	q.ready = append(q.ready, m)
}

// PushFront puts messages back at the head, in the given order.
func (q *Queue) PushFront(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	for _, m := range ms {
		q.track(m)
	}
	if q.head >= len(ms) {
		q.head -= len(ms)
		copy(q.ready[q.head:], ms)
		return
	}
	live := q.ready[q.head:]
	n := make([]*Message, 0, len(ms)+len(live))
	n = append(n, ms...)
	n = append(n, live...)
	q.ready = n
	q.head = 0
}

func (q *Queue) skip() {
	for q.head < len(q.ready) && q.ready[q.head] == nil {
		q.head++
	}
	if q.head == len(q.ready) {
		q.ready = q.ready[:0]
		q.head = 0
	} else if q.head > 1024 && q.head > len(q.ready)/2 {
		n := copy(q.ready, q.ready[q.head:])
		clear(q.ready[n:])
		q.ready = q.ready[:n]
		q.head = 0
	}
}

// Peek returns the head message.
func (q *Queue) Peek() *Message {
	q.skip()
	if q.head < len(q.ready) {
		return q.ready[q.head]
	}
	return nil
}

// PopFront removes and returns the head message.
func (q *Queue) PopFront() *Message {
	m := q.Peek()
	if m == nil {
		return nil
	}
	q.ready[q.head] = nil
	q.head++
	q.untrack(m)
	q.skip()
	return m
}

// remove takes m out of the ready list wherever it sits.
func (q *Queue) remove(m *Message) {
	for i := len(q.ready) - 1; i >= q.head; i-- {
		if q.ready[i] == m {
			q.ready[i] = nil
			break
		}
	}
	q.untrack(m)
}

// EarliestDeadline is the earliest deadline of a ready message.
func (q *Queue) EarliestDeadline() (int64, bool) {
	_, d, ok := q.index.Peek()
	return d, ok
}

// PopExpired removes every ready message whose deadline is <= now and
// returns them in (deadline, seq) order.
func (q *Queue) PopExpired(now int64) []*Message {
	var out []*Message
	q.index.PopDue(now, func(id uint64, _ int64) {
		out = append(out, q.slab[id])
	})
	if len(out) == 0 {
		return nil
	}
	for _, m := range out {
		q.slab[m.slot] = nil
		q.free = append(q.free, m.slot)
		m.slot = -1
		q.count--
		q.bytes -= m.Size()
	}
	// Compact the ready list in one pass.
	w := 0
	live := q.ready[q.head:]
	for _, r := range live {
		if r == nil || r.slot < 0 {
			continue
		}
		live[w] = r
		w++
	}
	clear(live[w:])
	q.ready = live[:w]
	q.head = 0
	// The index pops in (deadline, slot) order; slots are not replica
	// state, so order equal deadlines by sequence.
	slices.SortFunc(out, func(a, b *Message) int {
		if c := cmp.Compare(a.Deadline, b.Deadline); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	return out
}

// Each calls fn for each ready message in FIFO order.
func (q *Queue) Each(fn func(m *Message)) {
	for _, m := range q.ready[q.head:] {
		if m != nil {
			fn(m)
		}
	}
}

// SetDeadline changes the deadline of a ready message.
func (q *Queue) SetDeadline(m *Message, d int64) {
	if m.Deadline == d {
		return
	}
	if m.Deadline != ttl.NoDeadline {
		q.index.Remove(uint64(m.slot))
	}
	m.Deadline = d
	if d != ttl.NoDeadline {
		q.index.Push(uint64(m.slot), d)
	}
}

// Purge removes every ready message and returns how many there were.
func (q *Queue) Purge() int {
	n := q.count
	*q = Queue{seq: q.seq}
	return n
}

// Remove takes a ready message out wherever it sits.
func (q *Queue) Remove(m *Message) { q.remove(m) }
