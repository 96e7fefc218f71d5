package amqp

import (
	"sync"
)

// outQueue is a connection's bounded write queue: producers append encoded
// frames and never block on the socket; the writer goroutine takes
// everything queued at once. Producers include the state machine's effect
// sink (deliveries), which runs under the node's state lock and must never
// wait for a client, so a full queue does not make anyone wait: once more
// than limit bytes are waiting for the writer, the queue closes and
// overflow runs (once, on its own goroutine) to drop the connection. A
// client that stops reading therefore costs at most limit bytes plus one
// message, and delays nobody else.
type outQueue struct {
	mu       sync.Mutex
	buf      []byte
	closed   bool
	over     bool
	limit    int    // 0: no bound
	overflow func() // called once when the bound is passed
	signal   chan struct{}
}

func newOutQueue(limit int, overflow func()) *outQueue {
	return &outQueue{signal: make(chan struct{}, 1), limit: limit, overflow: overflow}
}

// append runs fill under the queue lock so frames of one call stay
// together. It reports false when the queue is closed or full.
func (q *outQueue) append(fill func([]byte) []byte) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	if q.limit > 0 && len(q.buf) >= q.limit {
		// The writer has not taken limit bytes: the peer is not reading.
		q.closed, q.over = true, true
		q.mu.Unlock()
		q.wake()
		if q.overflow != nil {
			go q.overflow()
		}
		return false
	}
	q.buf = fill(q.buf)
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

// take swaps the queued bytes for spare (emptied) and reports whether the
// queue was closed.
func (q *outQueue) take(spare []byte) ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.buf
	q.buf = spare[:0]
	return b, q.closed
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
