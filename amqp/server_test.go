package amqp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/internal/version"
	"github.com/raftmq/raftmq/proto"
)

func dial(t *testing.T, ts *testServer) *amqp091.Connection {
	t.Helper()
	c, err := amqp091.Dial(ts.url)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// assertServing checks that a fresh client can still connect and open a
// channel.
func assertServing(t *testing.T, ts *testServer) {
	t.Helper()
	c := dial(t, ts)
	if _, err := c.Channel(); err != nil {
		t.Fatalf("channel after a bad client: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func channelClosed(c *proto.Command) *proto.ChannelClosed       { return c.GetChannelClosed() }
func connectionClosed(c *proto.Command) *proto.ConnectionClosed { return c.GetConnectionClosed() }

// connection.start announces the build's version, the one raftmq
// --version and the management API report.
func TestServer_AnnouncesTheBuildVersion(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v9.8.7"
	ts := startServer(t, Config{})
	if v := dial(t, ts).Properties["version"]; v != "v9.8.7" {
		t.Fatalf("server property version = %v, want the build's v9.8.7", v)
	}
}

func TestServer_HundredChannels(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	props := c.Properties
	if props["product"] != "raftmq" {
		t.Errorf("product = %v", props["product"])
	}
	caps, _ := props["capabilities"].(amqp091.Table)
	for _, k := range []string{"publisher_confirms", "exchange_exchange_bindings", "basic.nack", "consumer_cancel_notify", "connection.blocked", "authentication_failure_close", "per_consumer_qos", "direct_reply_to"} {
		if caps[k] != true {
			t.Errorf("capability %s = %v", k, caps[k])
		}
	}
	var chans []*amqp091.Channel
	for i := 0; i < 100; i++ {
		ch, err := c.Channel()
		if err != nil {
			t.Fatalf("channel %d: %v", i, err)
		}
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		if err := ch.Close(); err != nil {
			t.Fatalf("close channel %d: %v", i, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close connection: %v", err)
	}
	// Channels that never consumed nor got a message cost no log entry.
	if closed := commandsOf(ts.broker, channelClosed); len(closed) != 0 {
		t.Fatalf("%d ChannelClosed commands for bare channels", len(closed))
	}
	eventually(t, 5*time.Second, "ConnectionClosed", func() bool {
		return len(commandsOf(ts.broker, connectionClosed)) == 1
	})
	eventually(t, 5*time.Second, "no connections", func() bool { return ts.srv.ConnectionCount() == 0 })
}

func TestServer_ConnectionIDsAreUnique(t *testing.T) {
	a := NewServer(Config{})
	b := NewServer(Config{})
	if a.newConnID() == b.newConnID() {
		t.Fatal("two servers (a restart) produced the same connection id")
	}
	if a.newConnID() == a.newConnID() {
		t.Fatal("one server produced the same connection id twice")
	}
}

func TestServer_HeartbeatKeepsIdleConnection(t *testing.T) {
	ts := startServer(t, Config{})
	c, err := amqp091.DialConfig(ts.url, amqp091.Config{Heartbeat: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	// Idle for more than three intervals: both sides' heartbeats must keep
	// the connection up.
	select {
	case err := <-closed:
		t.Fatalf("idle connection closed: %v", err)
	case <-time.After(3500 * time.Millisecond):
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatalf("channel after idling: %v", err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestServer_SilentPeerIsDropped(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.handshake(1, 0)
	start := time.Now()
	// The client sends nothing more; the server sends heartbeats and then
	// drops the connection after two silent intervals.
	_ = rc.nc.SetReadDeadline(time.Now().Add(6 * time.Second))
	heartbeats := 0
	for {
		f, err := wire.ReadFrame(rc.r, 1<<20)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("connection not dropped: %v", err)
			}
			break
		}
		if f.Type == wire.FrameHeartbeat {
			heartbeats++
		}
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 4*time.Second {
		t.Fatalf("dropped after %v, want about two intervals", d)
	}
	if heartbeats == 0 {
		t.Fatal("the server sent no heartbeat")
	}
	eventually(t, 5*time.Second, "ConnectionClosed", func() bool {
		return len(commandsOf(ts.broker, connectionClosed)) == 1
	})
}

// A peer whose last bytes are whole frames and the start of one more, all
// read at once, and then nothing: the frames in the reader's buffer are
// read without the socket, and the silence after them is still counted.
func TestServer_PeerSilentMidFrameIsDropped(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.handshake(1, 0)
	var b []byte
	for range 3 {
		b = append(b, wire.FrameHeartbeat, 0, 0, 0, 0, 0, 0, wire.FrameEnd)
	}
	b = append(b, wire.FrameMethod, 0, 0, 0, 0)
	rc.write(b)
	start := time.Now()
	_ = rc.nc.SetReadDeadline(time.Now().Add(6 * time.Second))
	for {
		if _, err := wire.ReadFrame(rc.r, 1<<20); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("connection not dropped: %v", err)
			}
			break
		}
	}
	if d := time.Since(start); d < 1500*time.Millisecond || d > 4*time.Second {
		t.Fatalf("dropped after %v, want about two intervals", d)
	}
}

func TestServer_WrongProtocolHeaders(t *testing.T) {
	ts := startServer(t, Config{})
	cases := map[string][]byte{
		"random bytes": {0x17, 0x03, 0x01, 0xde, 0xad, 0xbe, 0xef, 0x42, 0x99},
		"http request": []byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
		"amqp 0-10":    {'A', 'M', 'Q', 'P', 1, 1, 0, 10},
		"amqp 1.0":     {'A', 'M', 'Q', 'P', 0, 1, 0, 0},
		// 0-8 as its clients send it and as its spec wrote it: RabbitMQ
		// speaks 0-8's own framing to them, raftmq does not.
		"amqp 0-8":         {'A', 'M', 'Q', 'P', 1, 1, 8, 0},
		"amqp 0-8 as spec": {'A', 'M', 'Q', 'P', 1, 1, 9, 1},
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			rc := dialRaw(t, ts.addr)
			rc.write(in)
			_ = rc.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(rc.r)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if !bytes.Equal(got, wire.ProtocolHeader) {
				t.Fatalf("got %q, want the protocol header and a close", got)
			}
			assertServing(t, ts)
		})
	}
}

// A client of AMQP 0-9 is served as 0-9-1, as RabbitMQ serves it: the
// same connection.start (0-9 is the version it names), then a session.
func TestServer_AMQP09HeaderIsServedAs091(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.write(wire.ProtocolHeader09)
	start, ok := rc.method().(*wire.ConnectionStart)
	if !ok || start.VersionMajor != 0 || start.VersionMinor != 9 {
		t.Fatalf("got %#v, want connection.start for 0-9", start)
	}
	rc.send(0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest"})
	if _, ok := rc.method().(*wire.ConnectionTune); !ok {
		t.Fatal("no connection.tune")
	}
	rc.send(0, &wire.ConnectionTuneOk{ChannelMax: 0, FrameMax: 131072})
	rc.send(0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := rc.method().(*wire.ConnectionOpenOk); !ok {
		t.Fatal("no connection.open-ok")
	}
	rc.send(1, &wire.ChannelOpen{})
	if _, ok := rc.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("no channel.open-ok")
	}
}

func TestServer_BadFrames(t *testing.T) {
	ts := startServer(t, Config{})
	t.Run("truncated frame", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		f := wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{})
		rc.write(f[:5])
		_ = rc.nc.(*net.TCPConn).CloseWrite()
		rc.expectClosed()
		assertServing(t, ts)
	})
	t.Run("frame over frame-max", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 4096)
		rc.send(1, &wire.ChannelOpen{})
		if _, ok := rc.method().(*wire.ChannelOpenOk); !ok {
			t.Fatal("no channel.open-ok")
		}
		rc.write(wire.AppendFrame(nil, wire.FrameBody, 1, make([]byte, 5000)))
		rc.expectConnectionClose(replycode.FrameError)
		assertServing(t, ts)
	})
	t.Run("bad frame end", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		f := wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{})
		f[len(f)-1] = 'x'
		rc.write(f)
		rc.expectConnectionClose(replycode.FrameError)
		assertServing(t, ts)
	})
	t.Run("method on an unopened channel", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(7, &wire.QueueDeclare{Queue: "q"})
		cl := rc.expectConnectionClose(replycode.ChannelError)
		if cl.FailingClassID != 50 || cl.FailingMethodID != 10 {
			t.Fatalf("close names %d.%d", cl.FailingClassID, cl.FailingMethodID)
		}
		assertServing(t, ts)
	})
	t.Run("channel above channel-max", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(DefaultChannelMax+1, &wire.ChannelOpen{})
		rc.expectConnectionClose(replycode.NotAllowed)
	})
	t.Run("unknown method", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.write(wire.AppendFrame(nil, wire.FrameMethod, 0, []byte{0, 10, 0, 99}))
		rc.expectConnectionClose(replycode.CommandInvalid)
	})
	t.Run("content header without a method", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(1, &wire.ChannelOpen{})
		rc.method()
		rc.write(wire.AppendHeaderFrame(nil, 1, &wire.ContentHeader{ClassID: wire.ClassBasic}))
		rc.expectConnectionClose(replycode.UnexpectedFrame)
	})
	t.Run("second channel.open", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(1, &wire.ChannelOpen{})
		rc.method()
		rc.send(1, &wire.ChannelOpen{})
		rc.expectConnectionClose(replycode.ChannelError)
	})
	t.Run("message over the maximum size", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(1, &wire.ChannelOpen{})
		rc.method()
		rc.send(1, &wire.BasicPublish{RoutingKey: "q"})
		rc.write(wire.AppendHeaderFrame(nil, 1, &wire.ContentHeader{ClassID: wire.ClassBasic, BodySize: DefaultMaxMessageSize + 1}))
		m := rc.method()
		cl, ok := m.(*wire.ChannelClose)
		want := "PRECONDITION_FAILED - message size 16777217 is larger than configured max size 16777216"
		if !ok || cl.ReplyCode != replycode.PreconditionFailed || cl.ReplyText != want {
			t.Fatalf("got %#v", m)
		}
		// Until close-ok, the channel ignores what the client still sends.
		rc.write(wire.AppendFrame(nil, wire.FrameBody, 1, []byte("ignored")))
		rc.send(1, &wire.ChannelCloseOk{})
		rc.send(1, &wire.ChannelOpen{})
		if m := rc.method(); m.Name() != "channel.open-ok" {
			t.Fatalf("reopening the channel: %s", m.Name())
		}
	})
	t.Run("client closes the connection", func(t *testing.T) {
		rc := dialRaw(t, ts.addr)
		rc.handshake(0, 0)
		rc.send(0, &wire.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
		if _, ok := rc.method().(*wire.ConnectionCloseOk); !ok {
			t.Fatal("no close-ok")
		}
		rc.expectClosed()
	})
}

func TestServer_Authentication(t *testing.T) {
	ts := startServer(t, Config{})
	_, err := amqp091.Dial("amqp://guest:wrong@" + ts.addr + "/")
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != replycode.AccessRefused {
		t.Fatalf("wrong password: %v, want 403", err)
	}
	c, err := amqp091.DialConfig("amqp://"+ts.addr+"/", amqp091.Config{SASL: []amqp091.Authentication{&amqp091.AMQPlainAuth{Username: "alice", Password: "secret"}}})
	if err != nil {
		t.Fatalf("AMQPLAIN: %v", err)
	}
	_ = c.Close()
	_, err = amqp091.Dial("amqp://guest:guest@" + ts.addr + "/nope")
	if !errors.As(err, &ae) || ae.Code != replycode.NotAllowed {
		t.Fatalf("unknown vhost: %v, want 530", err)
	}
	c, err = amqp091.Dial("amqp://alice:secret@" + ts.addr + "/other")
	if err != nil {
		t.Fatalf("vhost other: %v", err)
	}
	_ = c.Close()
	assertServing(t, ts)
}

func TestCredentials(t *testing.T) {
	u, p, err := credentials("PLAIN", "\x00bob\x00pw")
	if err != nil || u != "bob" || p != "pw" {
		t.Fatalf("PLAIN: %q %q %v", u, p, err)
	}
	resp := wire.AppendTable(nil, wire.Table{{Key: "LOGIN", Value: "bob"}, {Key: "PASSWORD", Value: "pw"}})[4:]
	u, p, err = credentials("AMQPLAIN", string(resp))
	if err != nil || u != "bob" || p != "pw" {
		t.Fatalf("AMQPLAIN: %q %q %v", u, p, err)
	}
	for _, bad := range [][2]string{{"PLAIN", "bob"}, {"AMQPLAIN", "\xff"}, {"EXTERNAL", ""}} {
		if _, _, err := credentials(bad[0], bad[1]); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if !isLoopback(&net.TCPAddr{IP: net.IPv6loopback}) || isLoopback(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}) {
		t.Fatal("isLoopback is wrong")
	}
}

func TestServer_GuestOnlyFromLoopback(t *testing.T) {
	ts := startServer(t, Config{})
	// A connection whose peer address is not loopback.
	client, server := net.Pipe()
	c := ts.srv.newConn(remoteConn{server, &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4000}})
	go c.serve()
	rc := &rawClient{t: t, nc: client, r: bufio.NewReader(client)}
	t.Cleanup(func() { _ = client.Close() })
	rc.write(wire.ProtocolHeader)
	rc.method()
	rc.send(0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest"})
	m := rc.method()
	if cl, ok := m.(*wire.ConnectionClose); !ok || cl.ReplyCode != replycode.AccessRefused {
		t.Fatalf("got %#v, want 403", m)
	}
}

type remoteConn struct {
	net.Conn
	addr net.Addr
}

func (r remoteConn) RemoteAddr() net.Addr { return r.addr }

func TestServer_CloseForcesConnections(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	_ = ts.srv.Close()
	select {
	case err := <-closed:
		if err == nil || err.Code != replycode.ConnectionForced {
			t.Fatalf("close: %v, want 320", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client not closed")
	}
}

func TestServer_BlockedNotifications(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	blocked := c.NotifyBlocked(make(chan amqp091.Blocking, 2))
	ts.srv.Block("low on memory")
	select {
	case b := <-blocked:
		if !b.Active || b.Reason != "low on memory" {
			t.Fatalf("blocked = %+v", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.blocked")
	}
	ts.srv.Unblock()
	select {
	case b := <-blocked:
		if b.Active {
			t.Fatalf("unblocked = %+v", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection.unblocked")
	}
}

func TestServer_ListAndCloseConnection(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	if _, err := c.Channel(); err != nil {
		t.Fatal(err)
	}
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	list := ts.srv.Connections().List()
	if len(list) != 1 {
		t.Fatalf("%d connections listed", len(list))
	}
	info := list[0]
	if info.Node != "node-a" || info.User != "guest" || info.Vhost != "/" || info.Channels != 1 ||
		info.ClientProduct == "" || info.FrameMax != DefaultFrameMax || info.ConnectedAtMs == 0 {
		t.Fatalf("info = %v", info)
	}
	if ts.srv.Connections().Close("nope", "x") {
		t.Fatal("closed an unknown connection")
	}
	if !ts.srv.Connections().Close(info.Id, "maintenance") {
		t.Fatal("connection not found")
	}
	e := mustClosedWith(t, closed, replycode.ConnectionForced)
	if e.Reason != "CONNECTION_FORCED - maintenance" {
		t.Fatalf("reason %q", e.Reason)
	}
	eventually(t, 5*time.Second, "no connections", func() bool { return len(ts.srv.List()) == 0 })
}

// TestServer_ListConnectionName: the client's connection_name property
// (RabbitMQ's user_provided_name) and its other properties are listed.
func TestServer_ListConnectionName(t *testing.T) {
	ts := startServer(t, Config{})
	props := amqp091.NewConnectionProperties()
	props.SetClientConnectionName("orders-worker")
	c, err := amqp091.DialConfig(ts.url, amqp091.Config{Properties: props})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	list := ts.srv.Connections().List()
	if len(list) != 1 || list[0].GetUserProvidedName() != "orders-worker" {
		t.Fatalf("list = %v", list)
	}
	got := map[string]bool{}
	for _, f := range list[0].GetClientProperties().GetFields() {
		got[f.GetKey()] = true
	}
	if !got["connection_name"] || !got["product"] || !got["capabilities"] {
		t.Fatalf("client properties %v", list[0].GetClientProperties())
	}
}

func TestServer_ServeNeedsBroker(t *testing.T) {
	s := NewServer(Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := s.Serve(ln); !errors.Is(err, ErrNoBroker) {
		t.Fatalf("Serve = %v", err)
	}
}

// A client's connection.close is answered only after ConnectionClosed
// committed (RabbitMQ cleans up before close-ok too): the client's next
// connection finds its unacknowledged messages requeued. A Get in flight
// on a channel is finished first, so it precedes ConnectionClosed in the
// log.
func TestServer_ConnectionClosedBeforeCloseOk(t *testing.T) {
	ts := startServer(t, Config{})
	getStarted := make(chan struct{})
	release := make(chan struct{})
	ts.broker.script(nil, func(c *proto.Command) {
		if c.GetGet() != nil {
			close(getStarted)
			<-release
		}
	})
	c := dial(t, ts)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _, _ = ch.Get("q", false) }()
	<-getStarted
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// The close waits for the Get in hand.
	eventually(t, 5*time.Second, "connection.close read", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		for _, cn := range ts.srv.conns {
			return cn.closing.Load()
		}
		return false
	})
	if n := len(commandsOf(ts.broker, connectionClosed)); n != 0 {
		t.Fatalf("ConnectionClosed submitted while a Get was in hand")
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	ts.broker.mu.Lock()
	cmds := ts.broker.cmds
	ts.broker.mu.Unlock()
	if len(cmds) != 2 || cmds[0].GetGet() == nil || cmds[1].GetConnectionClosed() == nil {
		t.Fatalf("commands at close-ok: %v, want Get then ConnectionClosed", cmds)
	}
}
