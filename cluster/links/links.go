// Package links is a node's links to the other nodes: raft's stream
// layer and the address it advertises, the connections it dials (ended
// at once by its Close), and the fault-injection seam every one of them
// goes through (Links).
package links

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// ErrDown is returned when Links refuses a dial.
var ErrDown = errors.New("cluster: link blocked")

// Links cuts this node's outgoing traffic to chosen addresses (raft, gRPC
// and gossip): a fault-injection seam for tests. Every connection the node
// dials goes through it; Block refuses new dials and closes live
// connections to the blocked addresses, and gossip packets to them are
// dropped. A partition blocks both directions by blocking on both sides.
// Freeze is a peer that stops without closing anything (SIGSTOP, a long
// pause): live connections stay open and carry nothing until Heal, so
// only timeouts and what the rest of the cluster learns can end what
// waits on them. A nil *Links lets everything through.
type Links struct {
	mu      sync.Mutex
	blocked map[string]bool
	frozen  map[string]bool
	thaw    chan struct{} // closed and replaced by Heal and Thaw
	conns   map[*linkConn]struct{}
}

// New returns Links with nothing blocked.
func New() *Links {
	return &Links{blocked: map[string]bool{}, frozen: map[string]bool{}, thaw: make(chan struct{}),
		conns: map[*linkConn]struct{}{}}
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

// Freeze stalls the links to addrs: gossip packets are dropped, and
// connections, live ones and new ones alike, stay open but pass nothing
// (reads and writes wait, within their deadlines) until Heal. A new dial
// connects, as the kernel of a stopped process still accepts connections:
// a dial that failed at once let raft notice a frozen peer at its next
// heartbeat, which a real one never does. Gossip's own dials still fail.
func (l *Links) Freeze(addrs ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range addrs {
		l.frozen[a] = true
	}
}

// Thaw ends the freeze of the links to addrs alone.
func (l *Links) Thaw(addrs ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range addrs {
		delete(l.frozen, a)
	}
	close(l.thaw)
	l.thaw = make(chan struct{})
}

// Heal restores every link.
func (l *Links) Heal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.blocked)
	clear(l.frozen)
	close(l.thaw)
	l.thaw = make(chan struct{})
}

// Allowed reports whether addr may be reached now.
func (l *Links) Allowed(addr string) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.blocked[addr] && !l.frozen[addr]
}

// Dial connects to addr unless it is blocked, and tracks the connection
// (which stalls while addr is frozen).
func (l *Links) Dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	if l.isBlocked(addr) {
		return nil, ErrDown
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || l == nil {
		return c, err
	}
	return l.Track(c, addr)
}

func (l *Links) isBlocked(addr string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked[addr]
}

// Track registers a connection to addr so Block can close it and Freeze
// stall it.
func (l *Links) Track(c net.Conn, addr string) (net.Conn, error) {
	if l == nil {
		return c, nil
	}
	lc := &linkConn{Conn: c, addr: addr, links: l, closed: make(chan struct{})}
	l.mu.Lock()
	if l.blocked[addr] {
		l.mu.Unlock()
		_ = c.Close()
		return nil, ErrDown
	}
	l.conns[lc] = struct{}{}
	l.mu.Unlock()
	return lc, nil
}

// waitThawed returns once addr is not frozen, or fails when the connection
// closes or the deadline (unix ns, 0 for none) passes first.
func (l *Links) waitThawed(c *linkConn, deadline int64) error {
	for {
		l.mu.Lock()
		frozen, thaw := l.frozen[c.addr], l.thaw
		l.mu.Unlock()
		if !frozen {
			return nil
		}
		var expire <-chan time.Time
		var t *time.Timer
		if deadline != 0 {
			t = time.NewTimer(time.Until(time.Unix(0, deadline)))
			expire = t.C
		}
		var err error
		select {
		case <-thaw:
		case <-c.closed:
			err = net.ErrClosed
		case <-expire:
			err = os.ErrDeadlineExceeded
		}
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

type linkConn struct {
	net.Conn
	addr   string
	links  *Links
	once   sync.Once
	closed chan struct{}
	// Deadlines as the user set them (unix ns), honoured while frozen.
	readDL, writeDL atomic.Int64
}

// Read passes on what arrived only once the link is not frozen: a frozen
// peer sends nothing.
func (c *linkConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if werr := c.links.waitThawed(c, c.readDL.Load()); werr != nil {
		return 0, werr
	}
	return n, err
}

// Write waits while the link is frozen: a frozen peer takes nothing.
func (c *linkConn) Write(b []byte) (int, error) {
	if err := c.links.waitThawed(c, c.writeDL.Load()); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *linkConn) SetDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetDeadline(t)
}

func (c *linkConn) SetReadDeadline(t time.Time) error {
	c.readDL.Store(unixNano(t))
	return c.Conn.SetReadDeadline(t)
}

func (c *linkConn) SetWriteDeadline(t time.Time) error {
	c.writeDL.Store(unixNano(t))
	return c.Conn.SetWriteDeadline(t)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (c *linkConn) Close() error {
	c.once.Do(func() {
		c.links.mu.Lock()
		delete(c.links.conns, c)
		c.links.mu.Unlock()
		close(c.closed)
	})
	return c.Conn.Close()
}

// Gossip routes memberlist's traffic, t, through l: packets to a cut
// address are dropped, dials to one fail, and the connections are
// tracked.
func Gossip(t memberlist.Transport, l *Links) memberlist.Transport {
	return &gossipTransport{Transport: t, links: l}
}

// gossipTransport routes memberlist's traffic through Links.
type gossipTransport struct {
	memberlist.Transport
	links *Links
}

func (t *gossipTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if !t.links.Allowed(addr) {
		return time.Now(), nil // dropped on the floor, like a lost packet
	}
	return t.Transport.WriteTo(b, addr)
}

func (t *gossipTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if !t.links.Allowed(addr) {
		return nil, ErrDown
	}
	c, err := t.Transport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return t.links.Track(c, addr)
}
