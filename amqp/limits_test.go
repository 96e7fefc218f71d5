package amqp

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

func TestLimits_ChannelMaxIsNegotiatedAndEnforced(t *testing.T) {
	ts := startServer(t, Config{ChannelMax: 3})
	rc := dialRaw(t, ts.addr)
	rc.write(wire.ProtocolHeader)
	if _, ok := rc.method().(*wire.ConnectionStart); !ok {
		t.Fatal("no connection.start")
	}
	rc.send(0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: "\x00guest\x00guest", Locale: "en_US"})
	tune, ok := rc.method().(*wire.ConnectionTune)
	if !ok || tune.ChannelMax != 3 {
		t.Fatalf("tune = %#v, want channel_max 3", tune)
	}
	rc.send(0, &wire.ConnectionTuneOk{ChannelMax: 0, FrameMax: 0, Heartbeat: 0})
	rc.send(0, &wire.ConnectionOpen{VirtualHost: "/"})
	if _, ok := rc.method().(*wire.ConnectionOpenOk); !ok {
		t.Fatal("no connection.open-ok")
	}
	for id := uint16(1); id <= 3; id++ {
		rc.send(id, &wire.ChannelOpen{})
		if _, ok := rc.method().(*wire.ChannelOpenOk); !ok {
			t.Fatalf("channel %d not opened", id)
		}
	}
	rc.send(4, &wire.ChannelOpen{})
	cl := rc.expectConnectionClose(replycode.NotAllowed)
	if !strings.Contains(cl.ReplyText, "channel_max (3)") {
		t.Fatalf("close text %q", cl.ReplyText)
	}
}

func TestLimits_ClientChannelMaxLowersTheServers(t *testing.T) {
	ts := startServer(t, Config{ChannelMax: 10})
	c, err := amqp091.DialConfig(ts.url, amqp091.Config{ChannelMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Config.ChannelMax; got != 2 {
		t.Fatalf("negotiated channel_max %d, want 2", got)
	}
	list := ts.srv.Connections().List()
	if len(list) != 1 {
		t.Fatalf("%d connections", len(list))
	}
	if cc := ts.srv.lookup(list[0].Id); cc == nil || cc.channelMax != 2 {
		t.Fatalf("server side channel_max not lowered: %+v", cc)
	}
}

func TestLimits_FrameMaxIsNegotiatedAndEnforced(t *testing.T) {
	ts := startServer(t, Config{FrameMax: 8192})
	c, err := amqp091.DialConfig(ts.url, amqp091.Config{FrameSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if c.Config.FrameSize != 8192 {
		t.Fatalf("negotiated frame_max %d, want 8192", c.Config.FrameSize)
	}
	_ = c.Close()

	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 8192)
	rc.write(wire.AppendFrame(nil, wire.FrameMethod, 1, make([]byte, 9000)))
	rc.expectConnectionClose(replycode.FrameError)
}

func TestLimits_MaxConnectionsRefusesWith530(t *testing.T) {
	ts := startServer(t, Config{MaxConnections: 2})
	first := dial(t, ts)
	dial(t, ts)
	_, err := amqp091.Dial(ts.url)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != replycode.NotAllowed || !strings.Contains(ae.Reason, "node connection limit (2) is reached") {
		t.Fatalf("third connection: %v, want 530 NOT_ALLOWED", err)
	}
	if n := ts.srv.openConns.Load(); n != 2 {
		t.Fatalf("%d connections counted after a refusal", n)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a slot to free up", func() bool { return ts.srv.openConns.Load() == 1 })
	c, err := amqp091.Dial(ts.url)
	if err != nil {
		t.Fatalf("connection after one closed: %v", err)
	}
	_ = c.Close()
}

func TestLimits_MaxQueuesPerVhostRefusesNewQueuesWith406(t *testing.T) {
	ts := startServer(t, Config{MaxQueuesPerVhost: 2})
	ts.broker.queues = map[[2]string]bool{{"/", "a"}: true, {"/", "b"}: true, {"other", "x"}: true}
	_, ch := openChannel(t, ts)
	if _, err := ch.QueueDeclare("a", false, false, false, false, nil); err != nil {
		t.Fatalf("redeclaring an existing queue at the limit: %v", err)
	}
	if _, err := ch.QueueDeclarePassive("b", false, false, false, false, nil); err != nil {
		t.Fatalf("passive declare at the limit: %v", err)
	}
	for _, name := range []string{"c", ""} {
		_, ch := openChannel(t, ts)
		_, err := ch.QueueDeclare(name, false, false, false, false, nil)
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != replycode.PreconditionFailed || !strings.Contains(ae.Reason, "queue limit in vhost '/' (2) is reached") {
			t.Fatalf("declare %q over the limit: %v, want 406", name, err)
		}
	}
	declares := commandsOf(ts.broker, (*proto.Command).GetQueueDeclare)
	for _, d := range declares {
		if d.Name != "a" && d.Name != "b" {
			t.Fatalf("a refused declare reached the log: %v", d)
		}
	}
	c, err := amqp091.Dial("amqp://guest:guest@" + ts.addr + "/other")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	och, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := och.QueueDeclare("y", false, false, false, false, nil); err != nil {
		t.Fatalf("another vhost under its limit: %v", err)
	}
}

func TestLimits_MessageOverMaxSizeIs406OnTheChannel(t *testing.T) {
	ts := startServer(t, Config{MaxMessageSize: 100})
	c, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: make([]byte, 101)}); err != nil {
		t.Fatal(err)
	}
	e := mustClosedWith(t, closed, replycode.PreconditionFailed)
	if e.Reason != "PRECONDITION_FAILED - message size 101 is larger than configured max size 100" || e.Server != true {
		t.Fatalf("close %+v", e)
	}
	if c.IsClosed() {
		t.Fatal("a message over the size limit closed the connection; RabbitMQ closes the channel")
	}
}

// consumeRaw opens channel 1 on a raw connection and consumes q with
// no-ack; it returns the consumer reference the broker registered.
func consumeRaw(t *testing.T, ts *testServer, q *miniQueue) (*rawClient, *proto.ConsumerRef) {
	t.Helper()
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0)
	rc.send(1, &wire.ChannelOpen{})
	if _, ok := rc.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("no channel.open-ok")
	}
	rc.send(1, &wire.BasicConsume{Queue: "q", NoAck: true})
	if _, ok := rc.method().(*wire.BasicConsumeOk); !ok {
		t.Fatal("no basic.consume-ok")
	}
	q.mu.Lock()
	ref := q.consumer
	q.mu.Unlock()
	if ref == nil {
		t.Fatal("no consumer registered")
	}
	return rc, ref
}

// flood hands deliveries for ref to the server as the state machine's
// sink would, until the server dropped the connection or max were handed;
// it returns how many were handed. Deliver must never block.
func flood(ts *testServer, ref *proto.ConsumerRef, size, max int) int {
	body := make([]byte, size)
	for i := 1; i <= max; i++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: ref, DeliveryTag: uint64(i), RoutingKey: "q", Body: body})
		if ts.srv.lookup(ref.GetChannel().GetConnection()) == nil {
			return i
		}
	}
	return max
}

func TestFlow_ClientThatNeverReadsIsDroppedWithoutBlockingTheSink(t *testing.T) {
	// Hard bound: 8 MiB.
	ts := startServer(t, Config{MaxBufferedBytes: 1 << 20, MaxMessageSize: 64 << 10, WriteTimeout: time.Hour})
	q := &miniQueue{srv: ts.srv}
	ts.broker.script(q.answer, nil)
	_, ref := consumeRaw(t, ts, q)
	// The raw client reads nothing from here on. Loopback socket buffers
	// hold a few MiB; 256 MiB is far more than they and the bound hold.
	const size, max = 64 << 10, 4096
	n := flood(ts, ref, size, max)
	if n == max {
		eventually(t, 10*time.Second, "the connection to be dropped", func() bool {
			return ts.srv.lookup(ref.GetChannel().GetConnection()) == nil
		})
	}
	eventually(t, 10*time.Second, "ConnectionClosed", func() bool {
		return len(commandsOf(ts.broker, connectionClosed)) == 1
	})
	// Nobody else was held up.
	assertServing(t, ts)
}

func TestFlow_WriteTimeoutDropsAStalledClient(t *testing.T) {
	ts := startServer(t, Config{MaxBufferedBytes: 1 << 30, WriteTimeout: 300 * time.Millisecond})
	q := &miniQueue{srv: ts.srv}
	ts.broker.script(q.answer, nil)
	_, ref := consumeRaw(t, ts, q)
	// More than the socket buffers hold: the writer stalls, and the write
	// deadline, not the buffer bound, ends the connection.
	flood(ts, ref, 64<<10, 512)
	eventually(t, 10*time.Second, "the stalled connection to be dropped", func() bool {
		return ts.srv.lookup(ref.GetChannel().GetConnection()) == nil
	})
	assertServing(t, ts)
}

func TestFlow_OutQueueBound(t *testing.T) {
	overflows := make(chan struct{}, 2)
	stalled := false
	q := newOutQueue(10, 80, func() bool { return stalled }, func() { overflows <- struct{}{} })
	fill := func(n int) func([]byte) []byte {
		return func(b []byte) []byte { return append(b, make([]byte, n)...) }
	}
	// Over the soft bound while the socket takes bytes: a burst is fine.
	if !q.append(fill(8)) || !q.append(fill(8)) || !q.append(fill(8)) {
		t.Fatal("appends over the soft bound refused while the socket is not stalled")
	}
	stalled = true
	if q.append(fill(1)) {
		t.Fatal("append over the soft bound accepted while the socket is stalled")
	}
	<-overflows
	if !q.overflowed() || q.append(fill(1)) {
		t.Fatal("queue still open after overflowing")
	}
	if b, _, closed := q.take(nil, nil); len(b) != 24 || !closed {
		t.Fatalf("take = %d bytes, closed %v", len(b), closed)
	}
	select {
	case <-overflows:
		t.Fatal("overflow ran twice")
	default:
	}

	// The hard bound holds even when the socket takes bytes.
	stalled = false
	q = newOutQueue(10, 80, func() bool { return stalled }, func() { overflows <- struct{}{} })
	for q.append(fill(7)) {
		if n := q.pending(); n > 80+7 {
			t.Fatalf("%d bytes queued past the hard bound", n)
		}
	}
	<-overflows
	if n := q.pending(); n < 80 {
		t.Fatalf("overflowed at %d bytes, under the hard bound", n)
	}
}

func TestBlocked_PublishersStopUntilUnblocked(t *testing.T) {
	ts := startServer(t, Config{})
	pubConn, pub := openChannel(t, ts)
	blocked := pubConn.NotifyBlocked(make(chan amqp091.Blocking, 2))
	_, other := openChannel(t, ts)

	w := NewMemoryWatcher(ts.srv, 1000, func() uint64 { return 1000 })
	if !w.Check() {
		t.Fatal("no alarm at the high-water mark")
	}
	if b := <-blocked; !b.Active || b.Reason != MemoryBlockedReason {
		t.Fatalf("blocked = %+v", b)
	}
	if err := pub.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	pubID := ts.srv.Connections().List()[0].Id
	eventually(t, 5*time.Second, "the publisher's reader to stop", func() bool {
		c := ts.srv.lookup(pubID)
		return c != nil && c.readBlocked.Load()
	})
	if n := len(commandsOf(ts.broker, (*proto.Command).GetPublish)); n != 0 {
		t.Fatalf("%d publishes reached the log while blocked", n)
	}
	// A connection that does not publish keeps working.
	if _, err := other.QueueDeclare("side", false, false, false, false, nil); err != nil {
		t.Fatalf("declare while blocked: %v", err)
	}

	w.read = func() uint64 { return 999 }
	if w.Check() {
		t.Fatal("alarm still raised under the mark")
	}
	if b := <-blocked; b.Active {
		t.Fatalf("unblocked = %+v", b)
	}
	eventually(t, 5*time.Second, "the held publish", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetPublish)) == 1
	})
}

func TestBlocked_OnlyCapableClientsAreNotified(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0) // announces no capabilities
	ts.srv.Block(MemoryBlockedReason)
	ts.srv.Block(MemoryBlockedReason) // idempotent
	ts.srv.Unblock()
	// The next frame is the answer to channel.open, not a blocked
	// notification.
	rc.send(1, &wire.ChannelOpen{})
	if m := rc.method(); m.Name() != "channel.open-ok" {
		t.Fatalf("got %s", m.Name())
	}
}

func TestBlocked_ClosingABlockedPublisherEnds(t *testing.T) {
	ts := startServer(t, Config{})
	_, pub := openChannel(t, ts)
	ts.srv.Block(MemoryBlockedReason)
	defer ts.srv.Unblock()
	if err := pub.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	id := ts.srv.Connections().List()[0].Id
	eventually(t, 5*time.Second, "the publisher's reader to stop", func() bool {
		c := ts.srv.lookup(id)
		return c != nil && c.readBlocked.Load()
	})
	if !ts.srv.CloseConnection(id, "admin") {
		t.Fatal("no such connection")
	}
	eventually(t, 10*time.Second, "the blocked connection to end", func() bool { return ts.srv.lookup(id) == nil })
}

func TestFlow_BacklogBurstToAReadingConsumerIsDelivered(t *testing.T) {
	ts := startServer(t, Config{MaxBufferedBytes: 1 << 20})
	q := &miniQueue{srv: ts.srv}
	ts.broker.script(q.answer, nil)
	c, ch := openChannel(t, ts)
	deliveries, err := ch.Consume("q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	ref := q.consumer
	q.mu.Unlock()
	// A backlog handed at once to a consumer without prefetch: four times
	// the soft bound, under the hard one.
	const n, size = 64, 64 << 10
	body := make([]byte, size)
	for i := 1; i <= n; i++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: ref, DeliveryTag: uint64(i), RoutingKey: "q", Body: body})
	}
	for i := 1; i <= n; i++ {
		select {
		case d := <-deliveries:
			if d.DeliveryTag != uint64(i) || len(d.Body) != size {
				t.Fatalf("delivery %d: tag %d, %d bytes", i, d.DeliveryTag, len(d.Body))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("received %d of %d", i-1, n)
		}
	}
	if c.IsClosed() {
		t.Fatal("a reading consumer was dropped for a burst")
	}
}

func TestFlow_HardBoundHoldsTwoLargestMessages(t *testing.T) {
	if got := hardLimit(1<<20, 1<<10); got != 8<<20 {
		t.Fatalf("hardLimit = %d, want 8 times the soft bound", got)
	}
	if got := hardLimit(1<<20, 128<<20); got != 256<<20 {
		t.Fatalf("hardLimit = %d, want two of the largest messages", got)
	}
}
