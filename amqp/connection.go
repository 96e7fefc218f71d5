package amqp

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/internal/version"
	"github.com/raftmq/raftmq/proto"
)

// conn is one client connection: a reader goroutine (serve) that decodes
// frames and dispatches them, and a writer goroutine that drains out.
type conn struct {
	srv *Server
	id  string
	nc  net.Conn
	r   *bufio.Reader
	// noReadDeadline: the reader knows nc has no read deadline (readFrame).
	noReadDeadline bool
	// logp is the connection's logger; the handshake adds the user and
	// vhost to it while other goroutines (a server close, an admin's
	// close_connection) may already log through it.
	logp atomic.Pointer[slog.Logger]
	out  *outQueue

	ctx    context.Context
	cancel context.CancelFunc

	// Negotiated at tune-ok; read-only afterwards.
	channelMax uint16
	frameMax   uint32
	heartbeat  atomic.Int64 // time.Duration
	vhost      string
	user       string
	perms      permissions
	caps       wire.Table

	// Set at accept and during the handshake; read-only after open.
	connectedAt   time.Time
	clientProduct string
	clientVersion string
	// clientName is the client's connection_name property; clientProps
	// every property it sent, as the admin listing shows them.
	clientName  string
	clientProps *proto.Table
	// certUser is the subject CN of the client's verified TLS certificate;
	// certVerified is set when the client presented one (EXTERNAL).
	certUser     string
	certVerified bool

	opened     atomic.Bool // connection.open-ok sent
	closing    atomic.Bool // connection.close sent, waiting for close-ok
	wroteAny   atomic.Bool // a frame was written since the last heartbeat tick
	closeOnce  sync.Once
	downOnce   sync.Once
	recordOnce sync.Once     // ConnectionClosed submitted
	recorded   chan struct{} // closed when ConnectionClosed committed or was given up (set by recordOnce)
	// heldAtClose are the unseen requeues of what the stopped channels
	// held, sent with ConnectionClosed after cancelAtClose, the cancels of
	// their consumers (window.go's heldRequeue says why), and stopped the
	// channels, whose clients' seen deliveries it names (seen.go).
	// Guarded by mu.
	heldAtClose   []groupCmd
	cancelAtClose []*proto.Command
	stopped       []*channel
	writerEnd     chan struct{}
	// failed is closed when the server sends connection.close or the
	// socket fails: a reader waiting for publishers to be unblocked stops.
	failed     chan struct{}
	failedOnce sync.Once
	// readBlocked is set while the reader waits for publishers to be
	// unblocked (memory alarm).
	readBlocked atomic.Bool
	// writeSince is when the writer's current chunk write started (unix
	// nanoseconds), 0 while it is not writing.
	writeSince atomic.Int64
	// fenced is the last silence epoch the writer caught up with
	// (silence.go), fencedGroups the same for the logs of the groups
	// other than the metadata group. Writer only.
	fenced       uint64
	fencedGroups map[uint32]uint64

	mu       sync.Mutex
	channels map[uint16]*channel
}

func (s *Server) newConn(nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		srv:         s,
		id:          s.newConnID(),
		nc:          nc,
		r:           bufio.NewReaderSize(nc, 64<<10),
		ctx:         ctx,
		cancel:      cancel,
		channelMax:  s.cfg.ChannelMax,
		frameMax:    s.cfg.FrameMax,
		writerEnd:   make(chan struct{}),
		failed:      make(chan struct{}),
		channels:    map[uint16]*channel{},
		connectedAt: time.Now(),
	}
	c.out = newOutQueue(s.cfg.MaxBufferedBytes, hardLimit(s.cfg.MaxBufferedBytes, s.cfg.MaxMessageSize), c.stalled, c.overflow)
	c.logp.Store(s.log.With("conn", c.id, "peer", nc.RemoteAddr().String()))
	return c
}

// stallTime is how long a write may take nothing before the connection's
// buffer bound counts it as stalled.
const stallTime = time.Second

// stalled reports whether the socket has taken nothing of the current
// write for stallTime.
func (c *conn) stalled() bool {
	since := c.writeSince.Load()
	return since != 0 && time.Since(time.Unix(0, since)) >= stallTime
}

// overflow drops a connection whose outgoing buffer passed
// MaxBufferedBytes: its client does not read what it is sent. Nothing can
// be said to it (it reads nothing), so the socket is closed; the reader
// then ends the connection and the broker requeues its unacknowledged
// messages.
func (c *conn) overflow() {
	c.logger().Warn("closing connection: the client does not read what it is sent",
		"buffered_bytes_limit", c.srv.cfg.MaxBufferedBytes)
	c.markFailed()
	_ = c.nc.Close()
}

func (c *conn) markFailed() {
	c.failedOnce.Do(func() { close(c.failed) })
}

func (c *conn) ref() *proto.ConnectionRef {
	return &proto.ConnectionRef{Node: c.srv.node().NodeID(), Connection: c.id}
}

// serve runs the connection until it ends.
func (c *conn) serve() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := c.tlsHandshake(tc); err != nil {
			// Not a TLS client (plain AMQP on the TLS port) or a refused
			// certificate: nothing of AMQP was said, close the socket.
			c.logger().Info("TLS handshake failed", "err", err)
			c.cancel()
			_ = c.nc.Close()
			c.srv.removeConn(c)
			close(c.writerEnd)
			return
		}
	}
	go c.writer()
	err := c.handshake()
	if err == nil {
		err = c.readLoop()
	}
	c.end(err)
}

// end tears the connection down once: channels stop, the broker learns the
// connection is gone, queued frames are flushed and the socket closes.
func (c *conn) end(err error) {
	c.downOnce.Do(func() {
		switch {
		case err == nil, errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
			c.logger().Debug("connection closed")
		default:
			c.logger().Info("connection closed", "err", err)
		}
		chans := c.stopChannels()
		c.cancel()
		c.markFailed()
		c.out.close()
		select {
		case <-c.writerEnd:
		case <-time.After(c.srv.cfg.CloseTimeout):
		}
		c.lingerClose()
		awaitWorkers(chans, c.srv.cfg.CloseTimeout)
		c.awaitRecord()
		if c.opened.Load() {
			c.srv.openConns.Add(-1)
			c.srv.counts.connClosed.Add(1)
		}
		c.srv.removeConn(c)
	})
}

// stopChannels stops every channel's worker and forgets the channels; it
// returns the stopped channels.
func (c *conn) stopChannels() []*channel {
	c.mu.Lock()
	chans := make([]*channel, 0, len(c.channels))
	for _, ch := range c.channels {
		chans = append(chans, ch)
	}
	c.channels = map[uint16]*channel{}
	c.mu.Unlock()
	c.srv.counts.chClosed.Add(uint64(len(chans)))
	for _, ch := range chans {
		ch.stop()
		cancels, held := ch.heldRequeue()
		c.mu.Lock()
		c.cancelAtClose = append(c.cancelAtClose, cancels...)
		c.heldAtClose = append(c.heldAtClose, held...)
		c.stopped = append(c.stopped, ch)
		c.mu.Unlock()
	}
	return chans
}

// awaitWorkers waits, at most wait, for the workers of chans to end:
// their acknowledgements reached the log or failed, and the close can
// name what their clients saw (seen.go).
func awaitWorkers(chans []*channel, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for _, ch := range chans {
		select {
		case <-ch.done:
		case <-t.C:
			return
		}
	}
}

// recordClosed starts submitting ConnectionClosed, once, for an opened
// connection (the broker cancels its consumers, requeues its
// unacknowledged messages and deletes its exclusive queues), and returns
// a channel closed once it committed or was given up. A connection never
// opened has nothing in the log: its channel is closed at once.
func (c *conn) recordClosed() <-chan struct{} {
	if !c.opened.Load() {
		return closedChan
	}
	c.recordOnce.Do(func() {
		c.recorded = make(chan struct{})
		go func() {
			defer close(c.recorded)
			c.submitConnectionClosed()
		}()
	})
	return c.recorded
}

// closedChan is a channel that is closed.
var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// closeRecordWait bounds how long a connection's end waits for its
// ConnectionClosed to commit. With a quorum that takes milliseconds, and
// the client's next connection then finds the old one's messages back in
// their queues. Without one it can take for ever: a client's
// connection.close waited for its close-ok as long as the quorum was gone
// (the node's heartbeats kept the connection alive meanwhile), and a node
// being stopped after the others waited for its connections' ends until
// it gave up on them. Past the wait the record
// goes on in the background until it commits or the server closes; a
// node that stops before then is declared down by the leader, or declares
// its previous run down itself when it starts again, which releases the
// same consumers, deliveries and exclusive queues.
const closeRecordWait = 500 * time.Millisecond

// awaitRecord starts recording the connection's end and waits for the
// commit, at most closeRecordWait.
func (c *conn) awaitRecord() {
	t := time.NewTimer(closeRecordWait)
	defer t.Stop()
	select {
	case <-c.recordClosed():
	case <-t.C:
		c.logger().Info("connection closed before its end reached the log; recording it in the background")
	}
}

// lingerClose half-closes the socket and reads what the peer still sends
// (briefly) before closing it: closing with unread input resets the
// connection, and the peer could lose our last frames (a connection.close,
// or the protocol header) before reading them.
func (c *conn) lingerClose() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 4096)
		for total := 0; total < 1<<20; {
			n, err := c.nc.Read(buf)
			total += n
			if err != nil {
				break
			}
		}
	}
	_ = c.nc.Close()
}

func (c *conn) submitConnectionClosed() {
	// What the channels held for their consumers goes back unseen first.
	c.mu.Lock()
	cancels, held, stopped := c.cancelAtClose, c.heldAtClose, c.stopped
	c.cancelAtClose, c.heldAtClose, c.stopped = nil, nil, nil
	c.mu.Unlock()
	seen, listed := seenOf(stopped)
	// Retried until it commits, for as long as the server runs: a
	// connection gone from the node must be gone from the log.
	c.srv.recordEnds(c.srv.life, c.logger(), "connection close", cancels, held, &proto.Command{Cmd: &proto.Command_ConnectionClosed{
		ConnectionClosed: &proto.ConnectionClosed{Connection: c.ref(), Seen: seen, SeenListed: listed},
	}})
}

// writer writes queued frames and sends heartbeats when idle.
func (c *conn) writer() {
	defer close(c.writerEnd)
	w := bufio.NewWriterSize(c.nc, 64<<10)
	var spare []byte
	var spareMarks []mark
	var tick <-chan time.Time
	var ticker *time.Ticker
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	hb := time.Duration(0)
	for {
		if hb != c.heartbeatInterval() {
			hb = c.heartbeatInterval()
			if ticker != nil {
				ticker.Stop()
			}
			if hb > 0 {
				ticker = time.NewTicker(hb / 2)
				tick = ticker.C
			}
		}
		select {
		case <-c.out.signal:
		case <-tick:
			if !c.wroteAny.Swap(false) {
				c.out.append(wire.AppendHeartbeat)
			}
			continue
		}
		b, marks, closed := c.out.take(spare, spareMarks)
		spare, spareMarks = b, marks
		if len(marks) > 0 && c.srv.holdWrite != nil {
			c.srv.holdWrite(c)
		}
		if c.decidedBeforeASilence(marks) {
			var ok bool
			if b, ok = c.guardBeating(w, tick, b, marks); !ok {
				return
			}
		}
		if len(b) > 0 {
			c.wroteAny.Store(true)
			if err := c.write(w, b); err != nil {
				c.abort(err)
				return
			}
		}
		if closed {
			// Drain anything appended between take and close.
			if b, marks, _ := c.out.take(nil, nil); len(b) > 0 {
				_ = c.write(w, c.guard(b, marks))
			}
			return
		}
	}
}

// guardBeating is guard for frames decided before a silence of the
// node, run beside the writer, which writes a heartbeat at each tick
// until guard is done: guard waits for a log or a member of a group to
// answer, a second or two when a group elects, and a client that hears
// nothing for a few heartbeats closes the connection (RabbitMQ's
// heartbeats do not wait for deliveries either). What was written before
// ends with whole frames, so a heartbeat may go between. ok is false
// when a heartbeat's write failed: the connection is aborted.
func (c *conn) guardBeating(w *bufio.Writer, tick <-chan time.Time, b []byte, marks []mark) (out []byte, ok bool) {
	done := make(chan []byte, 1)
	go func() { done <- c.guard(b, marks) }()
	for {
		select {
		case out := <-done:
			return out, true
		case <-tick:
			if err := c.write(w, wire.AppendHeartbeat(nil)); err != nil {
				c.abort(err)
				<-done // guard gives up once the connection failed
				return nil, false
			}
		}
	}
}

// writeChunk is how much the writer hands the socket under one write
// deadline: WriteTimeout bounds a stall, not the time a large message
// takes to send.
const writeChunk = 256 << 10

// write writes b and flushes; a chunk the socket does not take within
// WriteTimeout fails the write.
func (c *conn) write(w *bufio.Writer, b []byte) error {
	defer c.writeSince.Store(0)
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		now := time.Now()
		c.writeSince.Store(now.UnixNano())
		_ = c.nc.SetWriteDeadline(now.Add(c.srv.cfg.WriteTimeout))
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	now := time.Now()
	c.writeSince.Store(now.UnixNano())
	_ = c.nc.SetWriteDeadline(now.Add(c.srv.cfg.WriteTimeout))
	return w.Flush()
}

// abort closes the socket after a write failure; the reader then ends.
func (c *conn) abort(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.logger().Warn("closing connection: the client read nothing for the write timeout", "timeout", c.srv.cfg.WriteTimeout)
	} else {
		c.logger().Debug("write failed", "err", err)
	}
	c.out.close()
	c.markFailed()
	_ = c.nc.Close()
}

func (c *conn) heartbeatInterval() time.Duration {
	return time.Duration(c.heartbeat.Load())
}

func (c *conn) setHeartbeat(d time.Duration) {
	c.heartbeat.Store(int64(d))
	select {
	case c.out.signal <- struct{}{}:
	default:
	}
}

// logger is the connection's current logger.
func (c *conn) logger() *slog.Logger { return c.logp.Load() }

// send queues one method frame.
func (c *conn) send(channel uint16, m wire.Method) {
	c.out.append(func(b []byte) []byte { return wire.AppendMethodFrame(b, channel, m) })
}

// sendContent queues a content method with its header and body frames.
func (c *conn) sendContent(channel uint16, m wire.Method, props *wire.Properties, body []byte) {
	c.out.append(func(b []byte) []byte { return wire.AppendContent(b, channel, m, props, body, c.frameMax) })
}

// fail sends connection.close for a hard error and waits (in the reader)
// for close-ok; the socket closes after CloseTimeout at the latest.
func (c *conn) fail(e *wire.Error) {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		c.markFailed()
		c.logger().Info("closing connection", "code", e.Code, "text", e.Text, "class", e.ClassID, "method", e.MethodID)
		c.send(0, e.Close())
		time.AfterFunc(c.srv.cfg.CloseTimeout, func() { c.end(errors.New("no connection.close-ok in time")) })
	})
}

// readFrame reads one frame with the read deadline heartbeats imply.
func (c *conn) readFrame(timeout time.Duration) (wire.Frame, error) {
	// Only a read of the socket needs the deadline. A publish is three
	// frames, most often all in the buffer already, and the clock read
	// and deadline set for each were 3 % of a publisher's node's CPU.
	if !wire.FrameBuffered(c.r) {
		if timeout > 0 {
			_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
			c.noReadDeadline = false
		} else if !c.noReadDeadline {
			_ = c.nc.SetReadDeadline(time.Time{})
			c.noReadDeadline = true
		}
	}
	return wire.ReadFrame(c.r, c.frameMax)
}

// handshake runs protocol header, start, tune and open.
func (c *conn) handshake() error {
	deadline := time.Now().Add(c.srv.cfg.HandshakeTimeout)
	_ = c.nc.SetReadDeadline(deadline)
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		// A peer that sent a few bytes of something else gets the header.
		if !errors.Is(err, io.EOF) {
			c.out.append(func(b []byte) []byte { return append(b, wire.ProtocolHeader...) })
		}
		return fmt.Errorf("protocol header: %w", err)
	}
	if !bytes.Equal(hdr[:], wire.ProtocolHeader) && !bytes.Equal(hdr[:], wire.ProtocolHeader09) {
		// spec: the server MUST respond with the protocol header it
		// supports and close the socket.
		c.out.append(func(b []byte) []byte { return append(b, wire.ProtocolHeader...) })
		return fmt.Errorf("unsupported protocol header %q", hdr[:])
	}
	c.send(0, &wire.ConnectionStart{
		VersionMajor:     wire.ProtocolMajor,
		VersionMinor:     wire.ProtocolMinor,
		ServerProperties: serverProperties(),
		Mechanisms:       c.mechanisms(),
		Locales:          "en_US",
	})
	m, err := c.handshakeMethod(deadline)
	if err != nil {
		return err
	}
	startOk, ok := m.(*wire.ConnectionStartOk)
	if !ok {
		return c.handshakeFail(wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "expected connection.start-ok, got %s", m.Name()))
	}
	if v, ok := startOk.ClientProperties.Get("capabilities"); ok {
		c.caps, _ = v.(wire.Table)
	}
	if v, ok := startOk.ClientProperties.Get("product"); ok {
		c.clientProduct, _ = v.(string)
	}
	if v, ok := startOk.ClientProperties.Get("version"); ok {
		c.clientVersion, _ = v.(string)
	}
	if v, ok := startOk.ClientProperties.Get("connection_name"); ok {
		c.clientName, _ = v.(string)
	}
	// A value the log's tables cannot carry leaves the listing without the
	// properties; it is no reason to refuse the client.
	c.clientProps, _ = tableToProto(startOk.ClientProperties)
	user, e := c.authenticate(startOk.Mechanism, startOk.Response)
	if e != nil {
		return c.handshakeFail(e)
	}
	c.user = user
	c.logp.Store(c.logger().With("user", user))

	cfg := c.srv.cfg
	c.send(0, &wire.ConnectionTune{ChannelMax: cfg.ChannelMax, FrameMax: cfg.FrameMax, Heartbeat: uint16(cfg.Heartbeat / time.Second)})
	m, err = c.handshakeMethod(deadline)
	if err != nil {
		return err
	}
	tuneOk, ok := m.(*wire.ConnectionTuneOk)
	if !ok {
		return c.handshakeFail(wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "expected connection.tune-ok, got %s", m.Name()))
	}
	if tuneOk.ChannelMax != 0 && tuneOk.ChannelMax < c.channelMax {
		c.channelMax = tuneOk.ChannelMax
	}
	switch fm := tuneOk.FrameMax; {
	case fm == 0:
	case fm < wire.FrameMinSize:
		return c.handshakeFail(wire.ConnError(replycode.NotAllowed, 10, 31, "frame_max=%d < %d min size", fm, wire.FrameMinSize))
	case fm > cfg.FrameMax:
		return c.handshakeFail(wire.ConnError(replycode.NotAllowed, 10, 31, "frame_max=%d > %d max size", fm, cfg.FrameMax))
	default:
		c.frameMax = fm
	}
	// The client's value wins (0 disables heartbeats), as in RabbitMQ.
	c.setHeartbeat(time.Duration(tuneOk.Heartbeat) * time.Second)

	m, err = c.handshakeMethod(deadline)
	if err != nil {
		return err
	}
	open, ok := m.(*wire.ConnectionOpen)
	if !ok {
		return c.handshakeFail(wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "expected connection.open, got %s", m.Name()))
	}
	if !c.srv.node().VhostExists(open.VirtualHost) {
		return c.handshakeFail(wire.ConnError(replycode.NotAllowed, 10, 40, "vhost %s not found", open.VirtualHost))
	}
	if _, _, _, ok := c.srv.node().Permission(c.user, open.VirtualHost); !ok {
		return c.handshakeFail(wire.ConnError(replycode.NotAllowed, 10, 40, "access to vhost '%s' refused for user '%s'", open.VirtualHost, c.user))
	}
	if e := c.vhostConnLimit(open.VirtualHost); e != nil {
		return c.handshakeFail(e)
	}
	// RabbitMQ checks its node connection limit (connection_max) at
	// connection.open too, and refuses with connection.close 530
	// NOT_ALLOWED rather than by closing the socket after the header: the
	// client learns why. Sockets still in the handshake do not count; the
	// handshake timeout bounds how long they last.
	if max := c.srv.cfg.MaxConnections; max > 0 {
		if n := c.srv.openConns.Add(1); n > int64(max) {
			c.srv.openConns.Add(-1)
			c.logger().Warn("connection refused: node connection limit reached", "limit", max)
			return c.handshakeFail(wire.ConnError(replycode.NotAllowed, 10, 40, "connection refused: node connection limit (%d) is reached", max))
		}
	} else {
		c.srv.openConns.Add(1)
	}
	c.vhost = open.VirtualHost
	// Opened under the server's lock, so a Pause either sees this
	// connection opened (and closes it) or is seen here. The node is
	// asked first, outside the lock: its watch calls Pause.
	refusing := c.srv.refusing()
	c.srv.mu.Lock()
	paused := c.srv.paused
	if paused == "" {
		paused = refusing
	}
	if paused == "" {
		c.opened.Store(true)
	}
	c.srv.mu.Unlock()
	if paused != "" {
		c.srv.openConns.Add(-1)
		return c.handshakeFail(wire.ConnError(replycode.ConnectionForced, 10, 40, "%s", paused))
	}
	// A vhost or user deleted since the checks above closed the
	// connections open then (Server.VhostDeleted, UserDeleted), and
	// passed this one by: looked at again now that it counts as open,
	// one of the two sees the deletion.
	gone := ""
	if !c.srv.node().VhostExists(c.vhost) {
		gone = vhostDeleted(c.vhost)
	} else if !c.srv.node().UserExists(c.user) {
		gone = userDeleted(c.user)
	}
	if gone != "" {
		c.opened.Store(false)
		c.srv.openConns.Add(-1)
		return c.handshakeFail(wire.ConnError(replycode.ConnectionForced, 10, 40, "%s", gone))
	}
	c.srv.counts.connOpened.Add(1)
	c.send(0, &wire.ConnectionOpenOk{})
	c.logp.Store(c.logger().With("vhost", c.vhost))
	c.logger().Debug("connection open", "channel_max", c.channelMax, "frame_max", c.frameMax, "heartbeat", c.heartbeatInterval())
	c.srv.mu.Lock()
	blocked, reason := c.srv.isBlocked, c.srv.blocked
	c.srv.mu.Unlock()
	if blocked {
		c.sendBlocked(true, reason)
	}
	return nil
}

// handshakeMethod reads the next method on channel 0 (heartbeats are
// skipped).
func (c *conn) handshakeMethod(deadline time.Time) (wire.Method, error) {
	for {
		_ = c.nc.SetReadDeadline(deadline)
		f, err := wire.ReadFrame(c.r, c.frameMax)
		if err != nil {
			if e, ok := wire.AsError(err); ok {
				return nil, c.handshakeFail(e)
			}
			return nil, err
		}
		switch {
		case f.Type == wire.FrameHeartbeat:
			continue
		case f.Type != wire.FrameMethod || f.Channel != 0:
			return nil, c.handshakeFail(wire.ConnError(replycode.UnexpectedFrame, 0, 0, "expected a method frame on channel 0 during the handshake, got %v", f))
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			return nil, c.handshakeFail(e)
		}
		if _, ok := m.(*wire.ConnectionClose); ok {
			c.send(0, &wire.ConnectionCloseOk{})
			return nil, io.EOF
		}
		return m, nil
	}
}

// handshakeFail sends connection.close and waits briefly for close-ok.
func (c *conn) handshakeFail(e *wire.Error) error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		c.send(0, e.Close())
	})
	deadline := time.Now().Add(c.srv.cfg.CloseTimeout)
	for {
		_ = c.nc.SetReadDeadline(deadline)
		f, err := wire.ReadFrame(c.r, c.frameMax)
		if err != nil {
			break
		}
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			if m, err := wire.DecodeMethod(f.Payload); err == nil {
				if _, ok := m.(*wire.ConnectionCloseOk); ok {
					break
				}
			}
		}
	}
	return e
}

// readLoop reads frames until the connection ends.
func (c *conn) readLoop() error {
	for {
		timeout := time.Duration(0)
		if hb := c.heartbeatInterval(); hb > 0 {
			// A peer silent for two intervals is gone.
			timeout = 2 * hb
		}
		f, err := c.readFrame(timeout)
		if err != nil {
			if e, ok := wire.AsError(err); ok {
				// The stream is out of step: frames can no longer be parsed.
				c.fail(e)
				return c.drainUntilCloseOk()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return fmt.Errorf("missed heartbeats from client, timeout: %v", timeout)
			}
			return err
		}
		if done, err := c.handleFrame(f); done {
			return err
		}
	}
}

// closeOkFrame is connection.close-ok on channel 0, byte for byte.
var closeOkFrame = wire.AppendMethodFrame(nil, 0, &wire.ConnectionCloseOk{})

// drainUntilCloseOk discards input after a framing error until the peer
// sends connection.close-ok, closes, or CloseTimeout passes. Reading the
// rest avoids resetting the socket under the peer before it read our
// connection.close.
func (c *conn) drainUntilCloseOk() error {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.cfg.CloseTimeout))
	var window []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.r.Read(buf)
		window = append(window, buf[:n]...)
		if bytes.Contains(window, closeOkFrame) {
			return nil
		}
		if len(window) > len(closeOkFrame) {
			window = append(window[:0], window[len(window)-len(closeOkFrame):]...)
		}
		if err != nil {
			return nil
		}
	}
}

// handleFrame dispatches one frame; done reports the end of the connection.
func (c *conn) handleFrame(f wire.Frame) (done bool, err error) {
	if f.Type == wire.FrameHeartbeat {
		return false, nil
	}
	if c.closing.Load() {
		// spec: after sending connection.close, discard all but
		// connection.close and connection.close-ok.
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			m, err := wire.DecodeMethod(f.Payload)
			if err == nil {
				switch m.(type) {
				case *wire.ConnectionCloseOk:
					return true, nil
				case *wire.ConnectionClose:
					c.send(0, &wire.ConnectionCloseOk{})
					return true, nil
				}
			}
		}
		return false, nil
	}
	if f.Channel == 0 {
		if f.Type != wire.FrameMethod {
			c.fail(wire.ConnError(replycode.UnexpectedFrame, 0, 0, "content frame on channel 0"))
			return false, nil
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			c.fail(e)
			return false, nil
		}
		return c.handleConnectionMethod(m)
	}
	if f.Channel > c.channelMax {
		// Like RabbitMQ's channel_max: a connection error 530.
		c.fail(wire.ConnError(replycode.NotAllowed, 0, 0, "channel %d is above the negotiated channel_max (%d)", f.Channel, c.channelMax))
		return false, nil
	}
	ch := c.channel(f.Channel)
	if ch == nil {
		if f.Type != wire.FrameMethod {
			c.fail(wire.ConnError(replycode.ChannelError, 0, 0, "expected 'channel.open' on channel %d", f.Channel))
			return false, nil
		}
		m, err := wire.DecodeMethod(f.Payload)
		if err != nil {
			e, _ := wire.AsError(err)
			c.fail(e)
			return false, nil
		}
		if _, ok := m.(*wire.ChannelOpen); !ok {
			c.fail(wire.ConnError(replycode.ChannelError, m.ClassID(), m.MethodID(), "expected 'channel.open' on channel %d", f.Channel))
			return false, nil
		}
		c.openChannel(f.Channel)
		return false, nil
	}
	if e := ch.handleFrame(f); e != nil {
		if e.Hard {
			c.fail(e)
		} else {
			ch.fail(e)
		}
	}
	return false, nil
}

func (c *conn) handleConnectionMethod(m wire.Method) (bool, error) {
	switch m := m.(type) {
	case *wire.ConnectionClose:
		c.logger().Debug("client closed the connection", "code", m.ReplyCode, "text", m.ReplyText)
		c.closing.Store(true)
		// Like RabbitMQ, clean up before close-ok: once the client has
		// it, the connection's unacknowledged messages are back in their
		// queues and its exclusive queues are gone, so its next
		// connection sees them that way. The workers finish the method
		// in hand first (within CloseTimeout), so none of their commands
		// follows ConnectionClosed in the log. The commit is awaited for
		// closeRecordWait at most: without a quorum the client is let go
		// and the record goes on without it.
		awaitWorkers(c.stopChannels(), c.srv.cfg.CloseTimeout)
		c.awaitRecord()
		c.send(0, &wire.ConnectionCloseOk{})
		return true, nil
	case *wire.ConnectionCloseOk:
		c.fail(wire.ConnError(replycode.ChannelError, 10, 51, "unexpected connection.close-ok"))
	case *wire.ConnectionBlocked, *wire.ConnectionUnblocked:
		c.fail(wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "%s is sent by the server", m.Name()))
	default:
		c.fail(wire.ConnError(replycode.CommandInvalid, m.ClassID(), m.MethodID(), "unexpected %s on channel 0", m.Name()))
	}
	return false, nil
}

// waitWhileBlocked holds the reader while publishers are blocked (memory
// alarm): a publishing connection stops being read, so its client's
// socket fills and it slows down, while its heartbeats still go out. It
// returns when publishers are unblocked or the connection is failing.
func (c *conn) waitWhileBlocked() {
	for {
		gate := c.srv.blockGate()
		if gate == nil {
			return
		}
		c.readBlocked.Store(true)
		select {
		case <-gate:
		case <-c.failed:
			c.readBlocked.Store(false)
			return
		}
		c.readBlocked.Store(false)
	}
}

func (c *conn) channel(id uint16) *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.channels[id]
}

func (c *conn) openChannel(id uint16) {
	ch := newChannel(c, id)
	c.mu.Lock()
	c.channels[id] = ch
	c.mu.Unlock()
	c.srv.counts.chOpened.Add(1)
	go ch.run()
	c.send(id, &wire.ChannelOpenOk{})
}

// removeChannel forgets a channel so its number may be reused; callers
// send channel.close-ok only after this.
func (c *conn) removeChannel(ch *channel) {
	c.mu.Lock()
	if c.channels[ch.id] == ch {
		delete(c.channels, ch.id)
		c.srv.counts.chClosed.Add(1)
	}
	c.mu.Unlock()
}

// sendBlocked sends connection.blocked/unblocked to a client that
// announced the capability.
func (c *conn) sendBlocked(blocked bool, reason string) {
	if !c.opened.Load() || !capability(c.caps, "connection.blocked") {
		return
	}
	if blocked {
		c.send(0, &wire.ConnectionBlocked{Reason: reason})
	} else {
		c.send(0, &wire.ConnectionUnblocked{})
	}
}

func capability(caps wire.Table, name string) bool {
	v, ok := caps.Get(name)
	b, _ := v.(bool)
	return ok && b
}

func serverProperties() wire.Table {
	host, _ := os.Hostname()
	return wire.Table{
		{Key: "capabilities", Value: wire.Table{
			{Key: "publisher_confirms", Value: true},
			{Key: "exchange_exchange_bindings", Value: true},
			{Key: "basic.nack", Value: true},
			{Key: "consumer_cancel_notify", Value: true},
			{Key: "connection.blocked", Value: true},
			{Key: "authentication_failure_close", Value: true},
			{Key: "per_consumer_qos", Value: true},
			{Key: "direct_reply_to", Value: true},
		}},
		{Key: "cluster_name", Value: "raftmq@" + host},
		{Key: "copyright", Value: "raftmq authors"},
		{Key: "information", Value: "Licensed under the MIT License"},
		{Key: "platform", Value: "Go " + runtime.Version()},
		{Key: "product", Value: "raftmq"},
		// The build's version, as raftmq --version and the management API
		// report it: the product is raftmq, not a RabbitMQ release.
		{Key: "version", Value: version.String()},
	}
}

// credentials extracts user and password from a PLAIN or AMQPLAIN
// response.
func credentials(mechanism, response string) (user, pass string, err error) {
	switch mechanism {
	case "PLAIN":
		// authzid NUL authcid NUL password
		parts := strings.Split(response, "\x00")
		if len(parts) != 3 {
			return "", "", errors.New("malformed PLAIN response")
		}
		return parts[1], parts[2], nil
	case "AMQPLAIN":
		// A field table without its length prefix.
		p := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(response)), uint32(len(response)))
		p = append(p, response...)
		t, _, err := wire.ReadTable(p)
		if err != nil {
			return "", "", fmt.Errorf("malformed AMQPLAIN response: %w", err)
		}
		l, _ := t.Get("LOGIN")
		pw, _ := t.Get("PASSWORD")
		ls, ok1 := l.(string)
		ps, ok2 := pw.(string)
		if !ok1 || !ok2 {
			return "", "", errors.New("AMQPLAIN response without LOGIN and PASSWORD")
		}
		return ls, ps, nil
	}
	return "", "", fmt.Errorf("unsupported authentication mechanism %q", mechanism)
}

func isLoopback(a net.Addr) bool {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	case nil:
		return false
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
