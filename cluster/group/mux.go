package group

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftmq/raftmq/internal/connset"
)

// The header a connection to a group other than the default one starts
// with, after whatever the node's links do first (TLS):
//
//	muxMagic | muxVersion | len(id) | id
//
// muxMagic is 0xC1, the one byte msgpack never uses and far above
// hashicorp/raft's rpc types (0 to 4, the first byte of every RPC its
// network transport sends), so a connection of the default group, which
// carries no header, is told from one that names its group by its first
// byte. Releases before the mux never see the header: they run the
// default group only, and queue groups wait for every node.
const (
	muxMagic   byte = 0xC1
	muxVersion byte = 1
)

// DefaultHeaderTimeout bounds how long an accepted connection may take
// to name its group, TLS handshake included (MuxConfig.HeaderTimeout).
const DefaultHeaderTimeout = 10 * time.Second

// DefaultOpenWait is MuxConfig.OpenWait's default. A node named in a
// queue group opens the group as its metadata log applies the entry
// that names it, while the group's leader adds it as a voter and sends
// to it as soon as its own metadata log applied that entry: a new node,
// which starts behind, was sent to a quarter of a second before it
// opened its groups, and every refusal was a warning here and a failed
// append on the leader.
const DefaultOpenWait = 2 * time.Second

// errMuxClosed is what a closed mux or layer answers.
var errMuxClosed = fmt.Errorf("group: raft mux closed: %w", net.ErrClosed)

// MuxConfig is how a Mux is built.
type MuxConfig struct {
	// HeaderTimeout bounds the wait for an accepted connection's first
	// bytes (the TLS handshake and the header), and then for its group's
	// transport to take it (default DefaultHeaderTimeout). A peer that
	// connects and says nothing costs a goroutine this long, no more.
	HeaderTimeout time.Duration
	// OpenWait is how long a connection that names a group without a
	// layer here waits for one before it is refused (default
	// DefaultOpenWait, at most HeaderTimeout).
	OpenWait time.Duration
	// Logger hears of refused connections (default slog.Default()).
	Logger *slog.Logger
}

// Mux shares one raft stream layer of a node (its one listener and
// dialer, authenticated by the node's links) among the node's groups:
// Layer gives each group a raft.StreamLayer of its own. A connection a
// group dials names the group in a header (the default group's sends
// none, as before the mux); the mux reads the header of each accepted
// connection, under a deadline and off the accept loop, and hands the
// connection to that group's layer, waiting OpenWait for a group that
// is not open yet. A connection that names no group of this node, or
// says nothing in time, is closed.
type Mux struct {
	base     raft.StreamLayer
	timeout  time.Duration
	openWait time.Duration
	log      *slog.Logger

	mu     sync.Mutex
	layers map[string]*muxLayer
	// added is closed, and replaced, when a layer is added: what waits
	// for its group's layer looks again.
	added chan struct{}
	// awaiting counts the connections waiting for their group's layer.
	awaiting int
	pending  map[net.Conn]struct{} // accepted, not yet handed to a layer
	closed   bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// NewMux starts sharing base, which the mux now owns: Close closes it.
func NewMux(base raft.StreamLayer, cfg MuxConfig) *Mux {
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.OpenWait <= 0 {
		cfg.OpenWait = DefaultOpenWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Mux{base: base, timeout: cfg.HeaderTimeout, openWait: min(cfg.OpenWait, cfg.HeaderTimeout), log: cfg.Logger,
		layers: map[string]*muxLayer{}, added: make(chan struct{}), pending: map[net.Conn]struct{}{}, done: make(chan struct{})}
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

// Layer is the stream layer of group id (DefaultID: the node's one group
// of the releases before the mux), for raft's network transport. Its
// Close ends the group's connections and frees the id for a later Layer.
func (m *Mux) Layer(id string) (raft.StreamLayer, error) {
	if rest, bulk := strings.CutPrefix(id, BulkLayerID(DefaultID)); id != DefaultID && (!bulk || rest != "") {
		if err := ValidID(rest); err != nil {
			return nil, err
		}
	}
	l := &muxLayer{m: m, id: id, conns: make(chan net.Conn), closed: make(chan struct{})}
	if id != DefaultID {
		l.header = append([]byte{muxMagic, muxVersion, byte(len(id))}, id...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errMuxClosed
	}
	if _, ok := m.layers[id]; ok {
		return nil, fmt.Errorf("group: raft mux: group %q already has a layer", id)
	}
	m.layers[id] = l
	close(m.added)
	m.added = make(chan struct{})
	return l, nil
}

// Close closes the shared layer, every group's layer and the connections
// still naming their group, and waits for the mux's goroutines.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.wg.Wait()
		return nil
	}
	m.closed = true
	close(m.done)
	layers := make([]*muxLayer, 0, len(m.layers))
	for _, l := range m.layers {
		layers = append(layers, l)
	}
	pending := m.pending
	m.pending = nil
	m.mu.Unlock()
	err := m.base.Close()
	for c := range pending {
		_ = c.Close()
	}
	for _, l := range layers {
		_ = l.Close()
	}
	m.wg.Wait()
	return err
}

func (m *Mux) acceptLoop() {
	defer m.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := m.base.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// As raft's own listener does: a failed accept (out of file
			// descriptors) is retried, more slowly each time.
			m.log.Warn("raft mux: accept failed", "err", err)
			select {
			case <-time.After(backoff):
			case <-m.done:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			_ = c.Close()
			return
		}
		m.pending[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c)
	}
}

// route reads which group c is for and hands it to that group's layer,
// or closes it.
func (m *Mux) route(c net.Conn) {
	defer m.wg.Done()
	deadline := time.Now().Add(m.timeout)
	_ = c.SetReadDeadline(deadline)
	id, first, err := readHeader(c)
	if err == nil {
		err = c.SetReadDeadline(time.Time{})
	}
	m.mu.Lock()
	_, open := m.pending[c]
	delete(m.pending, c)
	l := m.layers[id]
	m.mu.Unlock()
	if !open { // the mux closed it
		return
	}
	if err != nil {
		m.refuse(c, id, err)
		return
	}
	if l == nil && err == nil {
		l = m.awaitLayer(id)
	}
	if l == nil {
		m.refuse(c, id, errors.New("no such group on this node"))
		return
	}
	if first != nil {
		c = &prefixConn{Conn: c, prefix: first}
	}
	if !l.hand(c, deadline) {
		m.refuse(c, id, errors.New("the group's transport did not take the connection"))
	}
}

// awaitLayer waits up to openWait for group id's layer, and returns it,
// or nil when it did not come or the mux closed.
func (m *Mux) awaitLayer(id string) *muxLayer {
	t := time.NewTimer(m.openWait)
	defer t.Stop()
	m.mu.Lock()
	m.awaiting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.awaiting--
		m.mu.Unlock()
	}()
	for {
		m.mu.Lock()
		l, added := m.layers[id], m.added
		m.mu.Unlock()
		if l != nil {
			return l
		}
		select {
		case <-added:
		case <-t.C:
			return nil
		case <-m.done:
			return nil
		}
	}
}

func (m *Mux) refuse(c net.Conn, id string, why error) {
	m.log.Warn("raft mux: refused a connection", "remote", c.RemoteAddr().String(), "group", id, "reason", why.Error())
	_ = c.Close()
}

// readHeader reads the group a connection names. A first byte other
// than muxMagic is the default group's connection, whose first byte is
// returned to be read again.
func readHeader(c net.Conn) (id string, first []byte, _ error) {
	var b [3]byte
	if _, err := io.ReadFull(c, b[:1]); err != nil {
		return "", nil, fmt.Errorf("reading the header: %w", err)
	}
	if b[0] != muxMagic {
		return DefaultID, b[:1], nil
	}
	if _, err := io.ReadFull(c, b[1:3]); err != nil {
		return "", nil, fmt.Errorf("reading the header: %w", err)
	}
	if b[1] != muxVersion {
		return "", nil, fmt.Errorf("header version %d, this node knows %d", b[1], muxVersion)
	}
	n := int(b[2])
	if n == 0 || n > MaxIDLen+len(BulkLayerID(DefaultID)) {
		return "", nil, fmt.Errorf("group id of %d bytes (1 to %d)", n, MaxIDLen)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c, buf); err != nil {
		return "", nil, fmt.Errorf("reading the header: %w", err)
	}
	id = string(buf)
	if rest, bulk := strings.CutPrefix(id, BulkLayerID(DefaultID)); bulk && rest == "" {
		return id, nil, nil
	} else if bulk {
		id = rest
	}
	if err := ValidID(id); err != nil {
		return "", nil, err
	}
	return string(buf), nil, nil
}

// muxLayer is one group's raft.StreamLayer on a Mux.
type muxLayer struct {
	m      *Mux
	id     string
	header []byte // nil for the default group
	conns  chan net.Conn
	once   sync.Once
	closed chan struct{}

	accepted connset.Set
}

// hand gives c to the layer's Accept, unless the layer closes or
// deadline passes first.
func (l *muxLayer) hand(c net.Conn, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.conns <- c:
		return true
	case <-l.closed:
	case <-l.m.done:
	case <-t.C:
	}
	return false
}

// Accept implements net.Listener. The layer keeps what it accepted, so
// that Close can end the group's connections (raft's transport leaves
// accepted connections open).
func (l *muxLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		ac, ok := l.accepted.Add(c)
		if !ok {
			return nil, errMuxClosed
		}
		return ac, nil
	case <-l.closed:
		return nil, errMuxClosed
	}
}

// Close implements net.Listener: the layer takes no more connections,
// closes those it accepted, and frees its id on the mux.
func (l *muxLayer) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.m.mu.Lock()
		if l.m.layers[l.id] == l {
			delete(l.m.layers, l.id)
		}
		l.m.mu.Unlock()
		l.accepted.Close()
	})
	return nil
}

// Addr implements net.Listener: every group of a node has the node's
// one address.
func (l *muxLayer) Addr() net.Addr { return l.m.base.Addr() }

// Dial implements raft.StreamLayer: the shared layer's dial, and the
// group's header ahead of the first bytes raft writes.
func (l *muxLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	select {
	case <-l.closed:
		return nil, errMuxClosed
	default:
	}
	c, err := l.m.base.Dial(addr, timeout)
	if err != nil || l.header == nil {
		return c, err
	}
	return &headerConn{Conn: c, header: l.header}, nil
}

// headerConn sends header ahead of the first write, in the same write,
// so that a group's first RPC costs no extra packet.
type headerConn struct {
	net.Conn
	mu     sync.Mutex
	header []byte // what of it is still to be sent
}

func (c *headerConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.header) == 0 {
		return c.Conn.Write(b)
	}
	n, err := c.Conn.Write(append(c.header[:len(c.header):len(c.header)], b...))
	sent := min(n, len(c.header))
	c.header = c.header[sent:]
	return n - sent, err
}

// prefixConn reads prefix before the connection's own bytes: the byte
// the mux read to tell the default group's connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
