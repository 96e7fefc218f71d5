// Package connset keeps the open connections of a listener or a dialer
// so that one call ends them all: raft's network transport leaves the
// connections it accepted open when it stops, and whoever waits on a
// dialled one when a node stops (a vote asked of a vanished peer, a
// heartbeat to a frozen one) would otherwise wait for its own timeout.
package connset

import (
	"net"
	"sync"
)

// Set is the connections kept, until each closes or Close ends them. The
// zero value is an empty, open set.
type Set struct {
	mu     sync.Mutex
	conns  map[*Conn]struct{}
	closed bool
}

// Add keeps c until it is closed and returns it wrapped so that closing
// it leaves the set. Once the set was closed it closes c instead and
// returns false.
func (s *Set) Add(c net.Conn) (*Conn, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, false
	}
	if s.conns == nil {
		s.conns = map[*Conn]struct{}{}
	}
	kc := &Conn{Conn: c, set: s}
	s.conns[kc] = struct{}{}
	return kc, true
}

// Close closes every connection kept, and every one added later.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// Len is how many connections the set keeps.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Conn is a connection of a Set, which it leaves when closed.
type Conn struct {
	net.Conn
	set *Set
}

// Close leaves the set and closes the connection.
func (c *Conn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
