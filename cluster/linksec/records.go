package linksec

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
)

// A TLS connection writes each record to its socket on its own: a record
// carries at most 16 KiB, so raft's append of 256 KiB to a follower cost
// sixteen write calls, and on loopback each of them also runs the
// receiver's TCP work in the sender's call. recordConn hands the socket
// the records of one Write in one write (up to recordFlushAt at a time).
// On loopback, writes of 256 KiB took about a fifth less CPU, both ends
// together, and moved a third more a second (BenchmarkTLSWrite).
//
// Only the records of a Write wait: the handshake's, an alert, or a
// post-handshake message the connection sends while it reads go to the
// socket at once. The bytes waiting are sent before the Write returns,
// so a caller's deadline and error still cover them.

// recordFlushAt is how many bytes of records wait at most before they
// are written.
const recordFlushAt = 256 << 10

// recordBufs are the buffers records wait in, taken only for the time of
// a Write: an idle connection holds none.
var recordBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, recordFlushAt+32<<10)
	return &b
}}

// heldWrites is the socket under a recordConn's TLS: while a Write holds
// it, what TLS writes is kept in buf and written in one go.
type heldWrites struct {
	net.Conn

	mu      sync.Mutex
	holders int // Writes of the TLS connection under way
	buf     *[]byte
	err     error // the first failed write: every later write fails with it

	// flushing and closing let Close end a write blocked on the socket
	// outside the TLS connection's Write (recordConn.Close).
	flushing, closing atomic.Bool
}

func (h *heldWrites) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return 0, h.err
	}
	if h.holders == 0 {
		n, err := h.Conn.Write(p)
		h.err = err
		return n, err
	}
	*h.buf = append(*h.buf, p...)
	if len(*h.buf) >= recordFlushAt {
		if err := h.writeHeldLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// hold starts keeping what TLS writes, for one Write.
func (h *heldWrites) hold() {
	h.mu.Lock()
	if h.holders == 0 {
		h.buf = recordBufs.Get().(*[]byte)
	}
	h.holders++
	h.mu.Unlock()
}

// release writes what was kept, and stops keeping once no Write holds.
// Writes of one connection from several goroutines take turns in the TLS
// connection, and each one's records are written by its release at the
// latest.
func (h *heldWrites) release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushing.Store(true)
	defer h.flushing.Store(false)
	err := h.err
	if err == nil && h.closing.Load() {
		err = net.ErrClosed
	}
	if err == nil {
		err = h.writeHeldLocked()
	}
	if h.holders--; h.holders == 0 {
		*h.buf = (*h.buf)[:0]
		recordBufs.Put(h.buf)
		h.buf = nil
	}
	return err
}

// writeHeldLocked writes the kept bytes. Under mu.
func (h *heldWrites) writeHeldLocked() error {
	if len(*h.buf) == 0 {
		return nil
	}
	_, err := h.Conn.Write(*h.buf)
	*h.buf = (*h.buf)[:0]
	if err != nil {
		h.err = err
	}
	return err
}

// recordConn is a TLS connection whose Write hands the socket its records
// together: the TLS connection is Conn, and its socket held.
type recordConn struct {
	net.Conn
	held *heldWrites
}

// recordClient makes a TLS client of cfg over raw whose writes hand the
// socket their records together; tc is it, to handshake.
func recordClient(raw net.Conn, cfg *tls.Config) (c *recordConn, tc *tls.Conn) {
	h := &heldWrites{Conn: raw}
	tc = tls.Client(h, cfg)
	return &recordConn{Conn: tc, held: h}, tc
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.held.hold()
	n, err := c.Conn.Write(p)
	if ferr := c.held.release(); ferr != nil {
		// The records are not all on the wire: none counts as written.
		return 0, ferr
	}
	return n, err
}

// Close closes the connection. A Close while a Write is in the TLS
// connection closes the socket at once (crypto/tls's own interlock); one
// while the records are being written after it must too, rather than wait
// for them to send its close alert: the peer may not be reading.
func (c *recordConn) Close() error {
	c.held.closing.Store(true)
	if c.held.flushing.Load() {
		return c.held.Conn.Close()
	}
	return c.Conn.Close()
}

// ConnectionState is the TLS connection's state.
func (c *recordConn) ConnectionState() tls.ConnectionState {
	if s, ok := c.Conn.(interface{ ConnectionState() tls.ConnectionState }); ok {
		return s.ConnectionState()
	}
	return tls.ConnectionState{}
}

// recordCredentials are gRPC transport credentials whose connections hand
// the socket the records of each write together, as recordConn: gRPC
// flushes up to 32 KiB at a time, two records, and the internal service
// carries forwarded publishes and a member's deliveries to other nodes.
type recordCredentials struct {
	credentials.TransportCredentials
}

func (c recordCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	h := &heldWrites{Conn: raw}
	conn, info, err := c.TransportCredentials.ClientHandshake(ctx, authority, h)
	if err != nil {
		return nil, nil, err
	}
	return &recordConn{Conn: conn, held: h}, info, nil
}

func (c recordCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	h := &heldWrites{Conn: raw}
	conn, info, err := c.TransportCredentials.ServerHandshake(h)
	if err != nil {
		return nil, nil, err
	}
	return &recordConn{Conn: conn, held: h}, info, nil
}

func (c recordCredentials) Clone() credentials.TransportCredentials {
	return recordCredentials{c.TransportCredentials.Clone()}
}
