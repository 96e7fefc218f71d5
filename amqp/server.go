package amqp

import (
	"context"
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
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// Defaults of Config.
const (
	DefaultChannelMax       = 2047
	DefaultFrameMax         = 131072
	DefaultHeartbeat        = 60 * time.Second
	DefaultMaxMessageSize   = 16 << 20 // RabbitMQ 4's max_message_size
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultCloseTimeout     = 3 * time.Second
	// DefaultWriteTimeout is RabbitMQ's default TCP send timeout (15 s):
	// a write that makes no progress for this long closes the connection.
	DefaultWriteTimeout = 15 * time.Second
	// DefaultMaxBufferedBytes bounds what one connection may have queued
	// for the socket and not yet written.
	DefaultMaxBufferedBytes = 16 << 20
)

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
	// in bytes (default DefaultMaxMessageSize; at most fsm.MaxBodySize,
	// 128 MiB).
	MaxMessageSize int
	// HandshakeTimeout bounds the time from accept to connection.open.
	HandshakeTimeout time.Duration
	// CloseTimeout is how long the server waits for close-ok after sending
	// connection.close.
	CloseTimeout time.Duration
	// MaxConnections caps the open client connections of this node; 0
	// means no cap. A connection over the cap is refused at
	// connection.open with 530 NOT_ALLOWED, as RabbitMQ's connection_max.
	MaxConnections int
	// MaxQueuesPerVhost caps the number of queues in each vhost; 0 means
	// no cap. Declaring a new queue over it is refused with 406
	// PRECONDITION_FAILED, as RabbitMQ's max-queues vhost limit.
	MaxQueuesPerVhost int
	// MaxBufferedBytes bounds a connection's outgoing buffer (frames queued
	// and not yet written to the socket). A connection is closed when its
	// buffer holds more than this while its socket has taken nothing for
	// a second, or in any case more than 8 times this or two messages of
	// MaxMessageSize, whichever is more: the state machine's effects never
	// wait for a client.
	MaxBufferedBytes int
	// WriteTimeout closes a connection whose socket accepted nothing for
	// this long while the server had frames to write.
	WriteTimeout time.Duration
	// ConsumerLookahead lets the log assign a consumer with a prefetch of
	// at least 10 this many times its prefetch beyond it (at most 2,000
	// more), held by the consumer's node and written as the client acks
	// (window.go); 0 turns it off.
	ConsumerLookahead int
	// HeaderTimestamp and HeaderRoutingNode are RabbitMQ's incoming
	// message interceptors set_header_timestamp and
	// set_header_routing_node (interceptors.go); StampOff, the default,
	// adds nothing.
	HeaderTimestamp, HeaderRoutingNode Stamp
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
	c.MaxMessageSize = min(c.MaxMessageSize, fsm.MaxBodySize)
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
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
	paused    string // reason while paused (Pause), "" otherwise
	isBlocked bool
	unblocked chan struct{} // closed by Unblock; readers of publishing connections wait on it
	wg        sync.WaitGroup

	// openConns counts connections past connection.open (MaxConnections).
	openConns atomic.Int64
	counts    counters

	// alarms are the raised resource alarms (SetAlarm); alarmMu orders
	// their changes, so Block and Unblock follow the set.
	alarmMu sync.Mutex
	alarms  map[string]bool

	// life ends when Close gives up waiting for connections: what they
	// still try to record in the log stops then.
	life    context.Context
	endLife context.CancelFunc

	// holdWrite, set by tests before any connection, runs in a
	// connection's writer between taking frames the log decided and
	// writing them: a test holds a node there, as a pause of the process
	// could.
	holdWrite func(*conn)
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
	life, endLife := context.WithCancel(context.Background())
	return &Server{
		life:      life,
		endLife:   endLife,
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
		c.fail(wire.ConnError(replycode.ConnectionForced, 0, 0, "broker forced connection closure with reason 'shutdown'"))
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * s.cfg.CloseTimeout):
		s.log.Warn("connections still open after close timeout")
	}
	s.endLife()
	return nil
}

// recordEnds records the end of a channel or a connection: the cancels of
// its consumers, the unseen requeues of what its channels held (held, for
// the logs of their groups), then end, its ChannelClosed or
// ConnectionClosed, which would requeue flagged redelivered whatever was
// still assigned. With nothing held outside the metadata group's log
// (group 0) that is one entry there; otherwise the cancels and group 0's
// requeues, each other group's requeue in its log, and then end.
func (s *Server) recordEnds(ctx context.Context, log *slog.Logger, what string, cancels []*proto.Command, held []groupCmd, end *proto.Command) {
	cmds := cancels
	var others []groupCmd
	for _, h := range held {
		if h.group == 0 {
			cmds = append(cmds, h.cmd)
		} else {
			others = append(others, h)
		}
	}
	if len(others) == 0 {
		s.recordEnd(ctx, log, what, 0, append(cmds, end))
		return
	}
	if len(cmds) > 0 {
		s.recordEnd(ctx, log, what, 0, cmds)
	}
	for _, h := range others {
		s.recordEnd(ctx, log, what, h.group, []*proto.Command{h.cmd})
	}
	s.recordEnd(ctx, log, what, 0, []*proto.Command{end})
}

// recordEnd submits (a part of) the end of a channel or a connection to
// group's log (recordEnds says which) until it commits or ctx ends. An
// end that never reaches the log leaves the consumers of a connection that
// is gone in it: a no-ack one swallows every message assigned to it, an
// acknowledging one holds its credit for ever. The commands are
// idempotent (closing what is closed does nothing; a requeue of tags
// already settled is refused alone), so a retry after an unknown outcome
// is safe.
func (s *Server) recordEnd(ctx context.Context, log *slog.Logger, what string, group uint32, cmds []*proto.Command) {
	backoff := 50 * time.Millisecond
	for {
		res, err := s.submitTo(ctx, group, cmds)
		if err == nil {
			last := len(res) - 1
			if r := res[last]; r.GetCode() != 0 {
				if c := fsm.WithoutSeen(cmds[last]); c != nil {
					// A log below the level that names what the client
					// saw (a leader that counts a server of an earlier
					// release): the close goes again as that release
					// sends it; what came before it committed.
					cmds = []*proto.Command{c}
					continue
				}
				log.Warn(what+" refused", "code", r.GetCode(), "text", r.GetText())
			}
			return
		}
		if ctx.Err() != nil {
			log.Warn("cannot record "+what, "err", err)
			return
		}
		log.Warn("cannot record "+what+" yet, retrying", "err", err, "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			log.Warn("cannot record "+what, "err", err)
			return
		}
		backoff = min(2*backoff, 2*time.Second)
	}
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

// Block stops reading from publishing connections (a connection's reader
// waits when the next method it reads is a basic.publish) and sends
// connection.blocked with reason to every client that announced the
// connection.blocked capability, and to those that connect later, until
// Unblock. Connections that do not publish (consumers) keep working, as
// in RabbitMQ's resource alarms. Blocking a blocked server does nothing.
func (s *Server) Block(reason string) {
	s.mu.Lock()
	if s.isBlocked {
		s.mu.Unlock()
		return
	}
	s.isBlocked, s.blocked = true, reason
	s.unblocked = make(chan struct{})
	conns := s.snapshotConns()
	s.mu.Unlock()
	s.log.Warn("blocking publishers", "reason", reason)
	for _, c := range conns {
		c.sendBlocked(true, reason)
	}
}

// Unblock lets publishing connections read again and sends
// connection.unblocked to the clients Block notified.
func (s *Server) Unblock() {
	s.mu.Lock()
	if !s.isBlocked {
		s.mu.Unlock()
		return
	}
	s.isBlocked, s.blocked = false, ""
	close(s.unblocked)
	s.unblocked = nil
	conns := s.snapshotConns()
	s.mu.Unlock()
	s.log.Info("publishers unblocked")
	for _, c := range conns {
		c.sendBlocked(false, "")
	}
}

// blockGate returns a channel closed when publishers are unblocked, or nil
// when they are not blocked.
func (s *Server) blockGate() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isBlocked {
		return nil
	}
	return s.unblocked
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
func (s *Server) Deliver(d *fsm.Delivery) { s.DeliverIn(d, s.epoch()) }

// ConsumerCancelled implements fsm.Sink: it sends basic.cancel to a
// consumer whose queue went away.
func (s *Server) ConsumerCancelled(ref *proto.ConsumerRef) {
	ch := s.channelOf(ref.GetChannel())
	if ch == nil {
		return
	}
	ch.consumerCancelled(ref.GetTag())
}

// ChannelTimedOut implements fsm.Sink: the log closed a channel of this
// node whose oldest delivery went unacknowledged for its consumer timeout
// (its consumers are gone and its deliveries requeued); the client gets
// RabbitMQ's channel.close.
func (s *Server) ChannelTimedOut(ref *proto.ChannelRef, timeout int64) {
	ch := s.channelOf(ref)
	if ch == nil {
		return
	}
	ch.fail(timeoutError(ch.id, timeout))
}

// ConsumerTimedOut implements fsm.Sink: the log removed a consumer of this
// node whose delivery went unacknowledged for its consumer timeout, and
// requeued its deliveries (tags); the channel stays (consumerTimedOut).
func (s *Server) ConsumerTimedOut(ref *proto.ConsumerRef, timeout int64, tags []uint64) {
	ch := s.channelOf(ref.GetChannel())
	if ch == nil {
		return
	}
	ch.consumerTimedOut(ref.GetTag(), timeout, tags)
}

// NodeDown implements fsm.Sink: when this node was declared down (it was
// cut off from the leader for longer than the cluster waits, yet kept
// running), the log dropped its connections, channels and consumers and
// requeued what they held. Its clients lose their connections (320
// CONNECTION_FORCED) and reconnect: serving them on would deliver from
// consumers the log no longer has and settle acks against channels it
// removed. A restarted node's own release of its previous runs never
// comes here (the cluster keeps it from the run that made it:
// fsm.ReleaseSink); a NodeDown held through a silence comes with the
// time it was applied (NodeDownSince).
func (s *Server) NodeDown(node string) { s.NodeDownSince(node, time.Now()) }

// NodeDownSince is NodeDown for a NodeDown the log applied at: only the
// connections made by then had channels in the log it dropped. One made
// later registered its channels after it, and keeps them (a held NodeDown
// reaches the server after the silence that held it; quorum.DownSince).
func (s *Server) NodeDownSince(node string, at time.Time) {
	b := s.node()
	if b == nil || node != b.NodeID() {
		return
	}
	s.closeWhere(slog.LevelWarn, "this node was declared down by the cluster; reconnect", func(c *conn) bool { return !c.connectedAt.After(at) })
}

// VhostDeleted implements fsm.AccessSink: the log deleted vhost name, and
// this node's connections to it are closed with 320 CONNECTION_FORCED,
// as RabbitMQ closes them ("vhost 'name' is deleted"): their channels'
// exchanges and queues are gone, and their user's permissions there.
func (s *Server) VhostDeleted(name string) {
	s.closeWhere(slog.LevelInfo, vhostDeleted(name), func(c *conn) bool { return c.vhost == name })
}

// UserDeleted implements fsm.AccessSink: the connections of user name
// are closed as VhostDeleted's, "user 'name' is deleted".
func (s *Server) UserDeleted(name string) {
	s.closeWhere(slog.LevelInfo, userDeleted(name), func(c *conn) bool { return c.user == name })
}

// vhostDeleted and userDeleted are RabbitMQ's reasons for closing the
// connections of what was deleted.
func vhostDeleted(name string) string { return "vhost '" + name + "' is deleted" }
func userDeleted(name string) string  { return "user '" + name + "' is deleted" }

// closeWhere closes the opened connections that match with 320
// CONNECTION_FORCED and reason, and logs how many at level. It is called
// under the node's state lock (fsm.Sink): it only starts each close.
func (s *Server) closeWhere(level slog.Level, reason string, match func(c *conn) bool) {
	s.mu.Lock()
	conns := s.snapshotConns()
	s.mu.Unlock()
	if n := closeOpened(conns, reason, match); n > 0 {
		s.log.Log(context.Background(), level, "closing client connections", "reason", reason, "connections", n)
	}
}

// closeOpened closes those of conns that are open and match with 320
// CONNECTION_FORCED and reason, and returns how many it closed.
func closeOpened(conns []*conn, reason string, match func(c *conn) bool) int {
	closed := 0
	for _, c := range conns {
		// vhost and user are set before opened, and read-only after.
		if c.opened.Load() && match(c) {
			c.fail(wire.ConnError(replycode.ConnectionForced, 0, 0, "%s", reason))
			closed++
		}
	}
	return closed
}

// Pause closes every opened client connection with 320
// CONNECTION_FORCED and reason, and refuses connections at
// connection.open with the same until Resume. The node calls it when it
// has lost contact with a majority of the cluster, as RabbitMQ's
// pause_minority stops a minority node: its clients move to a node that
// can serve them, instead of waiting for confirms and deliveries that
// cannot come. What they held is requeued by the log when the cluster
// declares the node down.
func (s *Server) Pause(reason string) {
	if reason == "" {
		reason = "broker forced connection closure with reason 'no quorum'"
	}
	s.mu.Lock()
	s.paused = reason
	conns := s.snapshotConns()
	s.mu.Unlock()
	closeOpened(conns, reason, func(*conn) bool { return true })
}

// Resume takes clients again after Pause.
func (s *Server) Resume() {
	s.mu.Lock()
	s.paused = ""
	s.mu.Unlock()
}

// Paused reports why the server refuses clients ("" when it does not).
func (s *Server) Paused() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
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
