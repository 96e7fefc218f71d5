package amqp

import (
	"sync"

	"github.com/raftmq/raftmq/proto"
)

// hardLimitFactor sets the hard bound of an outQueue against its soft one.
const hardLimitFactor = 8

// hardLimit is the hard bound for a soft bound and a largest message: 8
// times the soft bound, and room for two of the largest messages.
func hardLimit(soft, maxMessage int) int {
	return max(hardLimitFactor*soft, 2*maxMessage)
}

// outQueue is a connection's bounded write queue: producers append encoded
// frames and never block on the socket; the writer goroutine takes
// everything queued at once. Producers include the state machine's effect
// sink (deliveries), which runs under the node's state lock and must never
// wait for a client, so a full queue does not make anyone wait: it closes
// and overflow runs (once, on its own goroutine) to drop the connection.
//
// The queue is full when more than limit bytes wait for the writer while
// the socket is stalled (stalled reports it: the writer's current write
// has taken nothing for a while), or when more than hard bytes wait in any
// case. A client that stops reading therefore costs at
// most the hard bound plus one message, and delays nobody else; a client
// that reads gets a burst (a backlog handed to a consumer without
// prefetch) of up to the hard bound.
type outQueue struct {
	mu       sync.Mutex
	buf      []byte
	closed   bool
	over     bool
	limit    int         // soft bound; 0: no bound
	hard     int         // hard bound, at least limit
	stalled  func() bool // whether the socket takes nothing at the moment
	overflow func()      // called once when a bound is passed
	signal   chan struct{}
	// marks locate in buf the frames decided by the log or its results
	// (deliveries, get-ok, confirms, returns), in order: the writer
	// checks them against the node's silences (silence.go).
	marks []mark
}

// mark is a run of frames in an outQueue's buffer that the node decided
// in a silence epoch (silence.go), and the delivery they carry, if any.
type mark struct {
	start, end int
	epoch      uint64
	// ch, group and tag name an acknowledged delivery (the log tag of
	// group's log); ch is nil for a no-ack delivery, a confirm or a
	// return, which stand whatever the log did since.
	ch    *proto.ChannelRef
	group uint32
	tag   uint64
	// wire and deadline are a consumer's delivery's wire tag and its
	// message's deadline (unix ms of log time), when it has one that can
	// still pass (0: none): the writer takes back a delivery it would
	// write long after its message died (guard).
	wire     uint64
	deadline int64
}

func newOutQueue(limit, hard int, stalled func() bool, overflow func()) *outQueue {
	return &outQueue{signal: make(chan struct{}, 1), limit: limit, hard: max(hard, limit), stalled: stalled, overflow: overflow}
}

// full reports whether the queue is over its bound. Locks: q.mu held.
func (q *outQueue) full() bool {
	switch n := len(q.buf); {
	case q.limit <= 0 || n < q.limit:
		return false
	case n >= q.hard:
		return true
	}
	return q.stalled != nil && q.stalled()
}

// append runs fill under the queue lock so frames of one call stay
// together. It reports false when the queue is closed or full.
func (q *outQueue) append(fill func([]byte) []byte) bool {
	return q.appendMarked(nil, fill)
}

// appendMarked is append, recording where the frames are under m (its
// start and end are set here) when m is not nil.
func (q *outQueue) appendMarked(m *mark, fill func([]byte) []byte) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.full() {
		// The writer cannot hand the bytes to the peer: it is not reading.
		q.closed, q.over = true, true
		q.mu.Unlock()
		q.wake()
		if q.overflow != nil {
			go q.overflow()
		}
		return false
	}
	start := len(q.buf)
	q.buf = fill(q.buf)
	if m != nil {
		m.start, m.end = start, len(q.buf)
		q.marks = append(q.marks, *m)
	}
	q.mu.Unlock()
	q.wake()
	return true
}

func (q *outQueue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take swaps the queued bytes and their marks for spare ones (emptied)
// and reports whether the queue was closed.
func (q *outQueue) take(spare []byte, spareMarks []mark) ([]byte, []mark, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, m := q.buf, q.marks
	q.buf, q.marks = spare[:0], spareMarks[:0]
	return b, m, q.closed
}

// pending is the number of bytes waiting for the writer.
func (q *outQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// overflowed reports whether the queue closed because it was full.
func (q *outQueue) overflowed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.over
}

// close stops accepting frames; the writer drains what is queued and ends.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}
