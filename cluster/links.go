package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// errLinkDown is returned when Links refuses a dial.
var errLinkDown = errors.New("cluster: link blocked")

// Links cuts this node's outgoing traffic to chosen addresses (raft, gRPC
// and gossip): a fault-injection seam for tests. Every connection the node
// dials goes through it; Block refuses new dials and closes live
// connections to the blocked addresses, and gossip packets to them are
// dropped. A partition blocks both directions by blocking on both sides.
// A nil *Links lets everything through.
type Links struct {
	mu      sync.Mutex
	blocked map[string]bool
	conns   map[*linkConn]struct{}
}

// NewLinks returns Links with nothing blocked.
func NewLinks() *Links {
	return &Links{blocked: map[string]bool{}, conns: map[*linkConn]struct{}{}}
}

// Block cuts the links to addrs (host:port as the node dials them).
func (l *Links) Block(addrs ...string) {
	l.mu.Lock()
	var doomed []*linkConn
	for _, a := range addrs {
		l.blocked[a] = true
	}
	for c := range l.conns {
		if l.blocked[c.addr] {
			doomed = append(doomed, c)
		}
	}
	l.mu.Unlock()
	for _, c := range doomed {
		_ = c.Close()
	}
}

// Heal restores every link.
func (l *Links) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.blocked)
}

// Allowed reports whether addr may be reached now.
func (l *Links) Allowed(addr string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.blocked[addr]
}

// dial connects to addr unless it is blocked, and tracks the connection.
func (l *Links) dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	if !l.Allowed(addr) {
		return nil, errLinkDown
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || l == nil {
		return c, err
	}
	return l.track(c, addr)
}

// track registers a connection to addr so Block can close it.
func (l *Links) track(c net.Conn, addr string) (net.Conn, error) {
	if l == nil {
		return c, nil
	}
	lc := &linkConn{Conn: c, addr: addr, links: l}
	l.mu.Lock()
	if l.blocked[addr] {
		l.mu.Unlock()
		_ = c.Close()
		return nil, errLinkDown
	}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

type linkConn struct {
	net.Conn
	addr  string
	links *Links
	once  sync.Once
}

func (c *linkConn) Close() error {
	c.once.Do(func() {
		c.links.mu.Lock()
		delete(c.links.conns, c)
		c.links.mu.Unlock()
	})
	return c.Conn.Close()
}
