package amqp

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// Defaults of Config.
const (
	DefaultChannelMax       = 2047
	DefaultFrameMax         = 131072
	DefaultHeartbeat        = 60 * time.Second
	DefaultMaxMessageSize   = 128 << 20
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultCloseTimeout     = 3 * time.Second
)

// Version is the server version announced in connection.start.
const Version = "0.1.0"

// Errors of Serve.
var (
	// ErrServerClosed is returned by Serve after Close.
	ErrServerClosed = errors.New("amqp: server closed")
	// ErrNoBroker is returned by Serve before SetBroker.
	ErrNoBroker = errors.New("amqp: no broker set")
)

// Config tunes a Server. Zero fields take their defaults.
type Config struct {
	// ChannelMax is the highest channel number a client may open.
	ChannelMax uint16
	// FrameMax is the largest frame the server accepts (at least 4096).
	FrameMax uint32
	// Heartbeat is the interval the server proposes; the client may lower it
	// (0 from the client disables heartbeats, as in RabbitMQ). A negative
	// value proposes no heartbeats.
	Heartbeat time.Duration
	// MaxMessageSize is the largest message body accepted from a publisher,
	// in bytes.
	MaxMessageSize int
	// HandshakeTimeout bounds the time from accept to connection.open.
	HandshakeTimeout time.Duration
	// CloseTimeout is how long the server waits for close-ok after sending
	// connection.close.
	CloseTimeout time.Duration
	// Logger receives structured logs; component=amqp is added.
	Logger *slog.Logger
}

func (c *Config) fill() {
	if c.ChannelMax == 0 {
		c.ChannelMax = DefaultChannelMax
	}
	if c.FrameMax == 0 {
		c.FrameMax = DefaultFrameMax
	}
	if c.FrameMax < wire.FrameMinSize {
		c.FrameMax = wire.FrameMinSize
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Heartbeat < 0 {
		c.Heartbeat = 0
	}
	if c.MaxMessageSize <= 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves AMQP 0-9-1 clients on behalf of a Broker. It implements
// fsm.Sink for the effects addressed to this node.
type Server struct {
	cfg    Config
	broker atomic.Pointer[brokerBox]
	log    *slog.Logger
	prefix string
	nextID atomic.Uint64

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[string]*conn
	closed    bool
	blocked   string // reason while blocked, "" otherwise
	isBlocked bool
	wg        sync.WaitGroup
}

var _ fsm.Sink = (*Server)(nil)

// brokerBox lets the broker be set after the server was built: the node
// needs the server (its Sink) before the server can have the node.
type brokerBox struct{ Broker }

// NewServer returns a server; it serves clients once SetBroker named the
// node it works for.
func NewServer(cfg Config) *Server {
	cfg.fill()
	var p [6]byte
	if _, err := rand.Read(p[:]); err != nil {
		// crypto/rand does not fail on supported platforms; fall back to
		// the clock so ids stay unique across restarts.
		t := time.Now().UnixNano()
		for i := range p {
			p[i] = byte(t >> (8 * i))
		}
	}
	return &Server{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "amqp"),
		prefix:    hex.EncodeToString(p[:]),
		listeners: map[net.Listener]struct{}{},
		conns:     map[string]*conn{},
	}
}

// SetBroker names the node the server works for. Call it before Serve.
func (s *Server) SetBroker(b Broker) {
	s.broker.Store(&brokerBox{b})
}

// node returns the broker, or nil before SetBroker.
func (s *Server) node() Broker {
	if b := s.broker.Load(); b != nil {
		return b.Broker
	}
	return nil
}

// Serve accepts connections on ln until ln fails or Close is called; it
// returns ErrServerClosed after Close and ErrNoBroker before SetBroker.
func (s *Server) Serve(ln net.Listener) error {
	if s.node() == nil {
		return ErrNoBroker
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	s.log.Info("listening", "addr", ln.Addr().String())
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := s.newConn(nc)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		}
		s.conns[c.id] = c
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			c.serve()
		}()
	}
}

// Close stops every listener and closes every connection with 320
// CONNECTION_FORCED, waiting (up to CloseTimeout) for them to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ln := range s.listeners {
		_ = ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.fail(wire.ConnError(wire.ConnectionForced, 0, 0, "broker forced connection closure with reason 'shutdown'"))
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * s.cfg.CloseTimeout):
		s.log.Warn("connections still open after close timeout")
	}
	return nil
}

func (s *Server) newConnID() string {
	return s.prefix + "-" + itoa(s.nextID.Add(1))
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c.id)
	s.mu.Unlock()
}

func (s *Server) lookup(id string) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns[id]
}

// Block sends connection.blocked with reason to every client that
// announced the connection.blocked capability, and to those that connect
// later, until Unblock.
func (s *Server) Block(reason string) {
	s.mu.Lock()
	s.isBlocked, s.blocked = true, reason
	conns := s.snapshotConns()
	s.mu.Unlock()
	for _, c := range conns {
		c.sendBlocked(true, reason)
	}
}

// Unblock sends connection.unblocked to the clients Block notified.
func (s *Server) Unblock() {
	s.mu.Lock()
	s.isBlocked, s.blocked = false, ""
	conns := s.snapshotConns()
	s.mu.Unlock()
	for _, c := range conns {
		c.sendBlocked(false, "")
	}
}

func (s *Server) snapshotConns() []*conn {
	out := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		out = append(out, c)
	}
	return out
}

// ConnectionCount is the number of open client connections.
func (s *Server) ConnectionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Deliver implements fsm.Sink: it queues basic.deliver for a consumer of
// this node. It never blocks.
func (s *Server) Deliver(d *fsm.Delivery) {
	ch := s.channelOf(d.Consumer.GetChannel())
	if ch == nil {
		s.log.Debug("delivery for an unknown channel", "consumer", d.Consumer.GetTag())
		return
	}
	ch.deliver(d)
}

// ConsumerCancelled implements fsm.Sink: it sends basic.cancel to a
// consumer whose queue went away.
func (s *Server) ConsumerCancelled(ref *proto.ConsumerRef) {
	ch := s.channelOf(ref.GetChannel())
	if ch == nil {
		return
	}
	ch.consumerCancelled(ref.GetTag())
}

func (s *Server) channelOf(ref *proto.ChannelRef) *channel {
	b := s.node()
	if ref == nil || b == nil || ref.GetNode() != b.NodeID() || ref.GetChannel() > 0xffff {
		return nil
	}
	c := s.lookup(ref.GetConnection())
	if c == nil {
		return nil
	}
	return c.channel(uint16(ref.GetChannel()))
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}
