package queue

import (
	"cmp"
	"slices"

	pb "google.golang.org/protobuf/proto"

	"github.com/raftmq/raftmq/proto"

	"github.com/raftmq/raftmq/ttl"
)

// Message is one queued copy of a published message: the metadata the
// state machine decides with. The body is not held here but named (Body):
// it stays in the log entry that published it, and the node reads it back
// where a delivery is carried out. Properties are held encoded, because a
// decoded proto.Properties costs hundreds of bytes per queued message and
// dead-lettering and headers routing need them in the state machine.
type Message struct {
	Exchange   string
	RoutingKey string
	// Props is the deterministic encoding of the proto.Properties the
	// message is delivered with (BCC removed); nil for none. Never
	// changed in place: copies of one publish share it.
	Props []byte
	Body  Body
	// x holds what few messages have (BCC keys, an inline body), so
	// that the rest do not pay for it.
	x *rare
	// Enqueued is the log stamp of the enqueue (ms).
	Enqueued int64
	Deadline int64 // in this queue; ttl.NoDeadline when none
	MsgTTL   int64 // per-message expiration (ms), -1 when none
	Seq      uint64
	// Returns counts the times a consumer handed the message back
	// (x-delivery-count); past the queue's delivery limit it dies.
	Returns     int64
	slot        int32 // position in the slab, -1 when not ready
	Priority    uint8 // the priority property (0 when none)
	Persistent  bool  // delivery-mode 2
	Redelivered bool
}

// Body names a message body: the log entry that published it (Index) and
// the position of the Publish command in that entry (Pos), with its size.
// Every replica applies the same entries, so the name is the same on every
// replica while the bytes are each node's own to keep. A body restored
// from a snapshot written before bodies left the state has no entry to
// name: Index is 0 and the message holds the bytes (SetInline).
type Body struct {
	Index uint64
	Pos   uint32
	Size  uint32
}

type rare struct {
	bcc    []string
	inline []byte
	// failures is the delivery-count of RabbitMQ 4.3 (failed delivery
	// attempts, fsm/apply_retry.go), where Returns is its acquired-count.
	// Few messages fail, so the rest do not pay for it.
	failures int64
}

// Failures is the message's count of failed delivery attempts.
func (m *Message) Failures() int64 {
	if m.x == nil {
		return 0
	}
	return m.x.failures
}

// SetFailures sets the count of failed delivery attempts. The rare part
// is copied first: a copy of the message may share it.
func (m *Message) SetFailures(n int64) {
	if m.x == nil && n == 0 {
		return
	}
	r := &rare{failures: n}
	if m.x != nil {
		r.bcc, r.inline = m.x.bcc, m.x.inline
	}
	m.x = r
}

func (m *Message) rare() *rare {
	if m.x == nil {
		m.x = &rare{}
	}
	return m.x
}

// BCC is the message's BCC routing keys (removed from its properties),
// kept for dead-lettering.
func (m *Message) BCC() []string {
	if m.x == nil {
		return nil
	}
	return m.x.bcc
}

// SetBCC sets the BCC routing keys; none costs nothing.
func (m *Message) SetBCC(keys []string) {
	if len(keys) > 0 || m.x != nil {
		m.rare().bcc = keys
	}
}

// SetInline makes the message hold its body's bytes (a body no log entry
// names).
func (m *Message) SetInline(b []byte) {
	m.Body = Body{Size: uint32(len(b))}
	m.rare().inline = b
}

// Inline returns the bytes of a body the message holds.
func (m *Message) Inline() ([]byte, bool) {
	if m.Body.Index != 0 {
		return nil, false
	}
	if m.x == nil {
		return nil, m.Body.Size == 0
	}
	return m.x.inline, true
}

// Properties decodes Props into a fresh value, nil for none; the caller
// may change it. Props is written by the state machine only, so a failed
// decode means a damaged snapshot, which restore already refused.
func (m *Message) Properties() *proto.Properties {
	if len(m.Props) == 0 {
		return nil
	}
	p := &proto.Properties{}
	if err := pb.Unmarshal(m.Props, p); err != nil {
		return nil
	}
	return p
}

// Queued reports whether a message that was pushed is still ready.
func (m *Message) Queued() bool { return m.slot >= 0 }

// Size is the byte size counted by x-max-length-bytes (the body).
func (m *Message) Size() int64 { return int64(m.Body.Size) }

// Queue holds the ready messages of one queue with an expiry index over
// them: one FIFO lane per priority (a single lane without x-max-priority),
// the highest non-empty lane first. It is deterministic and not safe for
// concurrent use.
type Queue struct {
	lanes   []lane // index = priority; allocated on first push
	maxPrio uint8
	count   int
	bytes   int64
	slab    []*Message // slot -> message, for the expiry index
	free    []int32
	index   ttl.Index
	seq     uint64
	// persistent counts the ready messages with delivery mode 2.
	persistent int
}

// lane is the FIFO of one priority, a slice used as a deque.
type lane struct {
	ready []*Message // contents from head; nil = removed
	head  int
}

// SetMaxPriority makes the queue a priority queue with priorities 0..max
// (x-max-priority); 0 leaves a single FIFO. Call it before the first push.
func (q *Queue) SetMaxPriority(max uint8) { q.maxPrio = max }

// MaxPriority is the x-max-priority the queue was given (0 for none).
func (q *Queue) MaxPriority() uint8 { return q.maxPrio }

// Priority is the lane m goes to: its priority property, capped at the
// queue's maximum as RabbitMQ caps it; no property counts as 0.
func (q *Queue) Priority(m *Message) int {
	return int(min(m.Priority, q.maxPrio))
}

func (q *Queue) lane(m *Message) *lane {
	if len(q.lanes) == 0 {
		q.lanes = make([]lane, int(q.maxPrio)+1)
	}
	return &q.lanes[q.Priority(m)]
}

// Len is the number of ready messages.
func (q *Queue) Len() int { return q.count }

// Persistent is the number of ready messages published persistent.
func (q *Queue) Persistent() int { return q.persistent }

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
	if m.Persistent {
		q.persistent++
	}
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
	if m.Persistent {
		q.persistent--
	}
}

// PushBack appends a ready message to the tail of its priority.
func (q *Queue) PushBack(m *Message) {
	l := q.lane(m)
	q.track(m)
	l.ready = append(l.ready, m)
}

// PushFront puts messages back at the head of their priorities, in the
// given order within each priority.
func (q *Queue) PushFront(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	if q.maxPrio == 0 {
		q.lane(ms[0]).pushFront(ms)
	} else {
		// Group by priority, keeping the given order within each.
		by := make([][]*Message, int(q.maxPrio)+1)
		for _, m := range ms {
			p := q.Priority(m)
			by[p] = append(by[p], m)
		}
		for _, g := range by {
			if len(g) > 0 {
				q.lane(g[0]).pushFront(g)
			}
		}
	}
	for _, m := range ms {
		q.track(m)
	}
}

func (l *lane) pushFront(ms []*Message) {
	if l.head >= len(ms) {
		l.head -= len(ms)
		copy(l.ready[l.head:], ms)
		return
	}
	live := l.ready[l.head:]
	n := make([]*Message, 0, len(ms)+len(live))
	n = append(n, ms...)
	n = append(n, live...)
	l.ready = n
	l.head = 0
}

func (l *lane) skip() {
	for l.head < len(l.ready) && l.ready[l.head] == nil {
		l.head++
	}
	if l.head == len(l.ready) {
		l.ready = l.ready[:0]
		l.head = 0
	} else if l.head > 1024 && l.head > len(l.ready)/2 {
		n := copy(l.ready, l.ready[l.head:])
		clear(l.ready[n:])
		l.ready = l.ready[:n]
		l.head = 0
	}
}

// top is the highest lane holding a ready message, nil when none does.
func (q *Queue) top() *lane {
	for p := len(q.lanes) - 1; p >= 0; p-- {
		l := &q.lanes[p]
		l.skip()
		if l.head < len(l.ready) {
			return l
		}
	}
	return nil
}

// Peek returns the head message: the oldest of the highest priority.
func (q *Queue) Peek() *Message {
	if l := q.top(); l != nil {
		return l.ready[l.head]
	}
	return nil
}

// PopFront removes and returns the head message.
func (q *Queue) PopFront() *Message {
	l := q.top()
	if l == nil {
		return nil
	}
	m := l.ready[l.head]
	l.ready[l.head] = nil
	l.head++
	q.untrack(m)
	l.skip()
	return m
}

// remove takes m out of the ready list wherever it sits.
func (q *Queue) remove(m *Message) {
	l := q.lane(m)
	for i := len(l.ready) - 1; i >= l.head; i-- {
		if l.ready[i] == m {
			l.ready[i] = nil
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
		if m.Persistent {
			q.persistent--
		}
	}
	// Compact each lane in one pass.
	for p := range q.lanes {
		l := &q.lanes[p]
		w := 0
		live := l.ready[l.head:]
		for _, r := range live {
			if r == nil || r.slot < 0 {
				continue
			}
			live[w] = r
			w++
		}
		clear(live[w:])
		l.ready = live[:w]
		l.head = 0
	}
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

// Each calls fn for each ready message in delivery order: priorities from
// the highest, FIFO within each.
func (q *Queue) Each(fn func(m *Message)) {
	for p := len(q.lanes) - 1; p >= 0; p-- {
		l := &q.lanes[p]
		for _, m := range l.ready[l.head:] {
			if m != nil {
				fn(m)
			}
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
	*q = Queue{seq: q.seq, maxPrio: q.maxPrio}
	return n
}

// Remove takes a ready message out wherever it sits.
func (q *Queue) Remove(m *Message) { q.remove(m) }
