package queue

import (
	"github.com/raftmq/raftmq/ttl"
)

// Size is the byte size counted by x-max-length-bytes (the body).
func (m *Message) Size() int64 { return int64(m.Body.Size) }

// rec is a ready message as the queue stores it: 40 bytes without a
// pointer, so a backlog is nothing for the garbage collector to mark.
// What the copies of a publish share is in the Table (meta); the deadline
// is in the expiry index (fTimed); what few messages have (returns,
// failed attempts, an inline body) is in Queue.rare (fRare).
type rec struct {
	seq   uint64
	enq   int64
	index uint64 // Body.Index
	pos   uint32 // Body.Pos
	size  uint32 // Body.Size
	meta  uint32 // Table handle
	flags uint8
}

const (
	fRedelivered = 1 << iota
	fDead        // removed from the middle; skipped, dropped by compaction
	fTimed       // has a deadline in the expiry index
	fRare        // has an entry in Queue.rare
)

// rareRec is what few messages have: returns, failed attempts, an
// inline body, and for a held message (Held, which has no flags) the
// redelivered flag.
type rareRec struct {
	returns, failures int64
	inline            []byte
	redelivered       bool
}

// rareOf is what m has of a rareRec's (redelivered aside), and whether
// that is anything.
func rareOf(m *Message) (rareRec, bool) {
	rr := rareRec{returns: m.Returns}
	if m.x != nil {
		rr.failures, rr.inline = m.x.failures, m.x.inline
	}
	return rr, rr.returns != 0 || rr.failures != 0 || rr.inline != nil
}

// fill gives m what rareOf took (redelivered aside).
func (rr *rareRec) fill(m *Message) {
	m.Returns = rr.returns
	if rr.failures != 0 || rr.inline != nil {
		x := m.rare()
		x.failures, x.inline = rr.failures, rr.inline
	}
}

// Queue holds the ready messages of one queue with an expiry index over
// them: one FIFO lane per priority (a single lane without x-max-priority),
// the highest non-empty lane first. Messages go in and come out as
// Message values; inside they are records (rec) in blocks, which the
// garbage collector does not scan. It is deterministic and not safe for
// concurrent use.
type Queue struct {
	t       *Table
	lanes   []lane // index = priority; allocated on first push
	maxPrio uint8
	count   int
	bytes   int64
	// index is the expiry index: id = sequence number, aux = lane.
	index ttl.Index
	seq   uint64
	rare  map[uint64]rareRec
	// persistent counts the ready messages with delivery mode 2.
	persistent int
	// sideStamp is the epoch index and rare were made in (cow.go).
	sideStamp uint64
}

// SetTable makes the queue keep the shared parts of its messages in t
// (one table for all the queues of a state machine, so that the copies
// of a publish share an entry). Call it before the first push; without
// it the queue has a table of its own.
func (q *Queue) SetTable(t *Table) { q.t = t }

func (q *Queue) table() *Table {
	if q.t == nil {
		q.t = &Table{}
	}
	return q.t
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

func (q *Queue) lane(p int) *lane {
	if len(q.lanes) == 0 {
		q.lanes = make([]lane, int(q.maxPrio)+1)
	}
	return &q.lanes[p]
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

// record turns m into a record, taking a reference to its shared part
// and counting it in.
func (q *Queue) record(m *Message, p int) rec {
	q.ownSide()
	r := rec{seq: m.Seq, enq: m.Enqueued, index: m.Body.Index, pos: m.Body.Pos, size: m.Body.Size, meta: q.table().intern(m)}
	if m.Redelivered {
		r.flags |= fRedelivered
	}
	if rr, ok := rareOf(m); ok {
		if q.rare == nil {
			q.rare = map[uint64]rareRec{}
		}
		q.rare[m.Seq] = rr
		r.flags |= fRare
	}
	if m.Deadline != ttl.NoDeadline {
		q.index.PushAux(m.Seq, m.Deadline, uint32(p))
		r.flags |= fTimed
	}
	q.count++
	q.bytes += m.Size()
	if m.Persistent {
		q.persistent++
	}
	return r
}

// message sets m from r without changing the queue (m is overwritten).
func (q *Queue) message(r *rec, m *Message) {
	*m = Message{Body: Body{Index: r.index, Pos: r.pos, Size: r.size}, Enqueued: r.enq, Deadline: ttl.NoDeadline,
		Seq: r.seq, Redelivered: r.flags&fRedelivered != 0}
	q.t.fill(m, r.meta)
	if r.flags&fTimed != 0 {
		m.Deadline, _ = q.index.Get(r.seq)
	}
	if r.flags&fRare != 0 {
		rr := q.rare[r.seq]
		rr.fill(m)
	}
}

// take sets m from r and counts r out of the queue (r itself is left for
// the caller to drop or mark).
func (q *Queue) take(r *rec, m *Message) {
	q.message(r, m)
	q.ownSide()
	if r.flags&fTimed != 0 {
		q.index.Remove(r.seq)
	}
	if r.flags&fRare != 0 {
		delete(q.rare, r.seq)
	}
	q.t.release(r.meta)
	q.count--
	q.bytes -= m.Size()
	if m.Persistent {
		q.persistent--
	}
}

// PushBack appends a ready message to the tail of its priority. The
// queue keeps a copy: later changes to m are not seen.
func (q *Queue) PushBack(m *Message) {
	p := q.Priority(m)
	r := q.record(m, p)
	q.lane(p).pushBack(q.t.cowState(), r)
}

// PushFront puts messages back at the head of their priorities, in the
// given order within each.
func (q *Queue) PushFront(ms []*Message) {
	if len(ms) == 0 {
		return
	}
	by := make([][]rec, int(q.maxPrio)+1)
	for _, m := range ms {
		p := q.Priority(m)
		by[p] = append(by[p], q.record(m, p))
	}
	for p, rs := range by {
		if len(rs) > 0 {
			q.lane(p).pushFront(q.t.cowState(), rs)
		}
	}
}

// top is the highest lane holding a ready message, nil when none does.
func (q *Queue) top() *lane {
	for p := len(q.lanes) - 1; p >= 0; p-- {
		if l := &q.lanes[p]; l.n > 0 {
			return l
		}
	}
	return nil
}

// Head returns the sequence number and deadline of the head message:
// the oldest of the highest priority.
func (q *Queue) Head() (seq uint64, deadline int64, ok bool) {
	l := q.top()
	if l == nil {
		return 0, 0, false
	}
	r := l.at(0)
	deadline = ttl.NoDeadline
	if r.flags&fTimed != 0 {
		deadline, _ = q.index.Get(r.seq)
	}
	return r.seq, deadline, true
}

// Peek returns a copy of the head message, nil when there is none.
func (q *Queue) Peek() *Message {
	l := q.top()
	if l == nil {
		return nil
	}
	m := &Message{}
	q.message(l.at(0), m)
	return m
}

// PopFront removes and returns the head message.
func (q *Queue) PopFront() *Message {
	l := q.top()
	if l == nil {
		return nil
	}
	m := &Message{}
	q.take(l.at(0), m)
	l.popFront(q.t.cow)
	return m
}

// Remove takes the ready message with m's sequence number out wherever
// it sits and returns it; nil when it is not ready.
func (q *Queue) Remove(m *Message) *Message {
	if len(q.lanes) == 0 {
		return nil
	}
	l := &q.lanes[q.Priority(m)]
	i := l.find(m.Seq)
	if i < 0 {
		return nil
	}
	out := &Message{}
	q.take(l.at(i), out)
	l.kill(q.t.cow, i)
	return out
}

// EarliestDeadline is the earliest deadline of a ready message.
func (q *Queue) EarliestDeadline() (int64, bool) {
	_, d, ok := q.index.Peek()
	return d, ok
}

// CountDue is the number of ready messages whose deadline is <= now.
func (q *Queue) CountDue(now int64) int { return q.index.CountDue(now) }

// PopExpired removes every ready message whose deadline is <= now and
// returns them in (deadline, seq) order, in one allocation.
func (q *Queue) PopExpired(now int64) []Message {
	n := q.index.CountDue(now)
	if n == 0 {
		return nil
	}
	out := make([]Message, 0, n)
	q.ownSide()
	q.index.PopDueAux(now, func(seq uint64, d int64, p uint32) {
		l := &q.lanes[p]
		i := l.find(seq)
		if i < 0 {
			return // not possible: every timed record is in its lane
		}
		r := l.mut(q.t.cow, i)
		r.flags &^= fTimed // already out of the index
		out = append(out, Message{})
		m := &out[len(out)-1]
		q.take(r, m)
		m.Deadline = d
		l.kill(q.t.cow, i)
	})
	return out
}

// Each calls fn for each ready message in delivery order: priorities from
// the highest, FIFO within each. m is valid during the call only.
func (q *Queue) Each(fn func(m *Message)) {
	var m Message
	for p := len(q.lanes) - 1; p >= 0; p-- {
		l := &q.lanes[p]
		for i := 0; i < l.n; i++ {
			if r := l.at(i); r.flags&fDead == 0 {
				q.message(r, &m)
				fn(&m)
			}
		}
	}
}

// UpdateDeadlines gives every ready message the deadline fn returns for
// it (m is valid during the call only).
func (q *Queue) UpdateDeadlines(fn func(m *Message) int64) {
	var m Message
	for p := range q.lanes {
		l := &q.lanes[p]
		for i := 0; i < l.n; i++ {
			r := l.at(i)
			if r.flags&fDead != 0 {
				continue
			}
			q.message(r, &m)
			d := fn(&m)
			if d == m.Deadline {
				continue
			}
			q.ownSide()
			r = l.mut(q.t.cow, i)
			if r.flags&fTimed != 0 {
				q.index.Remove(r.seq)
				r.flags &^= fTimed
			}
			if d != ttl.NoDeadline {
				q.index.PushAux(r.seq, d, uint32(p))
				r.flags |= fTimed
			}
		}
	}
}

// Purge removes every ready message and returns how many there were.
func (q *Queue) Purge() int {
	n := q.count
	for p := range q.lanes {
		l := &q.lanes[p]
		for i := 0; i < l.n; i++ {
			if r := l.at(i); r.flags&fDead == 0 {
				q.t.release(r.meta)
			}
		}
	}
	for p := range q.lanes {
		q.lanes[p].free(q.cow())
	}
	*q = Queue{t: q.t, seq: q.seq, maxPrio: q.maxPrio}
	return n
}
