package amqp

import (
	"sync"
)

// outQueue is a connection's unbounded write queue: producers append
// encoded frames and never block on the socket; the writer goroutine takes
// everything queued at once. Nothing is dropped until the connection is gone.
type outQueue struct {
	mu     sync.Mutex
	buf    []byte
	closed bool
	signal chan struct{}
}

func newOutQueue() *outQueue { return &outQueue{signal: make(chan struct{}, 1)} }

// append runs fill under the queue lock so frames of one call stay
// together. It reports false when the queue is closed.
func (q *outQueue) append(fill func([]byte) []byte) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.buf = fill(q.buf)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
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

// close stops accepting frames; the writer drains what is queued and ends.
func (q *outQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
}
