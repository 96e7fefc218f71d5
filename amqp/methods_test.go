package amqp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

func (b *fakeBroker) script(answer func(*proto.Command) *proto.Result, hook func(*proto.Command)) {
	b.mu.Lock()
	b.answer, b.onSubmit = answer, hook
	b.mu.Unlock()
}

func openChannel(t *testing.T, ts *testServer) (*amqp091.Connection, *amqp091.Channel) {
	t.Helper()
	c := dial(t, ts)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return c, ch
}

func mustClosedWith(t *testing.T, closed <-chan *amqp091.Error, code int) *amqp091.Error {
	t.Helper()
	select {
	case err := <-closed:
		if err == nil || err.Code != code {
			t.Fatalf("closed with %v, want %d", err, code)
		}
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("not closed, want %d", code)
	}
	return nil
}

func TestMethods_Topology(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		switch {
		case c.GetQueueDeclare() != nil:
			// The state machine names server-named queues.
			return &proto.Result{Queue: "amq.gen-named-by-the-log", MessageCount: 3, ConsumerCount: 1}
		case c.GetQueuePurge() != nil:
			return &proto.Result{MessageCount: 7}
		case c.GetQueueDelete() != nil:
			return &proto.Result{MessageCount: 2}
		}
		return nil
	}, nil)
	_, ch := openChannel(t, ts)
	if err := ch.ExchangeDeclare("logs", "topic", true, false, false, false, amqp091.Table{"alternate-exchange": "ae"}); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, false, true, false, amqp091.Table{"x-message-ttl": int32(5000)})
	if err != nil {
		t.Fatal(err)
	}
	if q.Name != "amq.gen-named-by-the-log" || q.Messages != 3 || q.Consumers != 1 {
		t.Fatalf("declare-ok = %+v", q)
	}
	if err := ch.QueueBind(q.Name, "a.*", "logs", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeBind("dst", "k", "logs", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeUnbind("dst", "k", "logs", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueUnbind(q.Name, "a.*", "logs", nil); err != nil {
		t.Fatal(err)
	}
	if n, err := ch.QueuePurge(q.Name, false); err != nil || n != 7 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if n, err := ch.QueueDelete(q.Name, true, true, false); err != nil || n != 2 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if err := ch.ExchangeDelete("logs", true, false); err != nil {
		t.Fatal(err)
	}

	ed := commandsOf(ts.broker, (*proto.Command).GetExchangeDeclare)
	if len(ed) != 1 || ed[0].Vhost != "/" || ed[0].Name != "logs" || ed[0].Type != "topic" || !ed[0].Durable ||
		ed[0].Arguments.GetFields()[0].GetValue().GetLongString() == nil {
		t.Fatalf("exchange declare = %v", ed)
	}
	qd := commandsOf(ts.broker, (*proto.Command).GetQueueDeclare)
	if len(qd) != 1 || qd[0].Name != "" || !qd[0].Exclusive || qd[0].Connection.GetNode() != "node-a" ||
		qd[0].Arguments.GetFields()[0].GetValue().GetInt32() != 5000 {
		t.Fatalf("queue declare = %v", qd)
	}
	binds := commandsOf(ts.broker, (*proto.Command).GetBind)
	if len(binds) != 2 || binds[0].Source != "logs" || binds[0].Destination != q.Name || binds[0].DestinationIsExchange ||
		binds[0].RoutingKey != "a.*" || !binds[1].DestinationIsExchange || binds[1].Destination != "dst" {
		t.Fatalf("binds = %v", binds)
	}
	if u := commandsOf(ts.broker, (*proto.Command).GetUnbind); len(u) != 2 {
		t.Fatalf("unbinds = %v", u)
	}
	del := commandsOf(ts.broker, (*proto.Command).GetQueueDelete)
	if len(del) != 1 || !del[0].IfUnused || !del[0].IfEmpty {
		t.Fatalf("queue delete = %v", del)
	}
	if xd := commandsOf(ts.broker, (*proto.Command).GetExchangeDelete); len(xd) != 1 || !xd[0].IfUnused {
		t.Fatalf("exchange delete = %v", xd)
	}
}

func TestMethods_ResultCodeClosesChannel(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if c.GetQueueDeclare() != nil {
			return &proto.Result{Code: 404, Text: "NOT_FOUND - no queue 'missing' in vhost '/'"}
		}
		if c.GetExchangeDeclare() != nil {
			return &proto.Result{Code: 406, Text: "inequivalent arg 'type' for exchange 'x'"}
		}
		return nil
	}, nil)
	c, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	_, err := ch.QueueDeclarePassive("missing", false, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != 404 || ae.Reason != "NOT_FOUND - no queue 'missing' in vhost '/'" {
		t.Fatalf("passive declare: %v", err)
	}
	mustClosedWith(t, closed, 404)
	// The connection survives a channel exception.
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	err = ch2.ExchangeDeclare("x", "fanout", false, false, false, false, nil)
	if !errors.As(err, &ae) || ae.Code != 406 || ae.Reason != "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x'" {
		t.Fatalf("exchange declare: %v", err)
	}
	if c.IsClosed() {
		t.Fatal("a channel error closed the connection")
	}
}

func TestMethods_PublishConfirmsAndReturns(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		p := c.GetPublish()
		if p == nil {
			return nil
		}
		switch p.RoutingKey {
		case "nowhere":
			return &proto.Result{Routed: false}
		case "full":
			return &proto.Result{Routed: true, Rejected: true}
		}
		return &proto.Result{Routed: true}
	}, nil)
	_, ch := openChannel(t, ts)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 100))
	returns := ch.NotifyReturn(make(chan amqp091.Return, 10))
	ctx := context.Background()
	keys := []string{"q", "nowhere", "q", "full", "q"}
	for _, k := range keys {
		err := ch.PublishWithContext(ctx, "", k, true, false, amqp091.Publishing{
			ContentType: "text/plain", Headers: amqp091.Table{"n": int16(3)}, Body: []byte("body-" + k),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var got []amqp091.Confirmation
	for len(got) < len(keys) {
		select {
		case c := <-confirms:
			got = append(got, c)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d confirms of %d", len(got), len(keys))
		}
	}
	for i, c := range got {
		if c.DeliveryTag != uint64(i+1) || c.Ack != (keys[i] != "full") {
			t.Fatalf("confirm %d = %+v", i, c)
		}
	}
	select {
	case r := <-returns:
		if r.ReplyCode != 312 || r.ReplyText != "NO_ROUTE" || r.RoutingKey != "nowhere" || string(r.Body) != "body-nowhere" || r.ContentType != "text/plain" {
			t.Fatalf("return = %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return")
	}
	pubs := commandsOf(ts.broker, (*proto.Command).GetPublish)
	if len(pubs) != len(keys) {
		t.Fatalf("%d publishes", len(pubs))
	}
	p := pubs[0]
	if p.Vhost != "/" || p.Exchange != "" || !p.Mandatory || string(p.Body) != "body-q" || p.Properties.GetContentType() != "text/plain" ||
		p.Properties.GetHeaders().GetFields()[0].GetValue().GetInt16() != 3 || p.Channel.GetChannel() != 1 {
		t.Fatalf("publish = %v", p)
	}
}

// The return must precede the confirm of the same message, and consecutive
// acks coalesce.
func TestMethods_ReturnBeforeConfirmOnTheWire(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if p := c.GetPublish(); p != nil {
			return &proto.Result{Routed: p.RoutingKey != "nowhere"}
		}
		return nil
	}, nil)
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0)
	rc.send(1, &wire.ChannelOpen{})
	rc.method()
	rc.send(1, &wire.ConfirmSelect{})
	if m := rc.method(); m.Name() != "confirm.select-ok" {
		t.Fatalf("got %s", m.Name())
	}
	var burst []byte
	for _, k := range []string{"a", "b", "c", "nowhere"} {
		burst = wire.AppendContent(burst, 1, &wire.BasicPublish{RoutingKey: k, Mandatory: true}, nil, []byte("x"), 4096)
	}
	rc.write(burst)
	var seen []string
	var lastAck uint64
	for lastAck < 4 {
		m := rc.method()
		switch m := m.(type) {
		case *wire.BasicAck:
			seen = append(seen, "ack")
			if m.DeliveryTag <= lastAck {
				t.Fatalf("ack %d after %d", m.DeliveryTag, lastAck)
			}
			lastAck = m.DeliveryTag
		case *wire.BasicReturn:
			seen = append(seen, "return")
			if lastAck >= 4 {
				t.Fatal("return after its confirm")
			}
			for i := 0; i < 2; i++ { // header and body
				if _, err := rc.next(); err != nil {
					t.Fatal(err)
				}
			}
		default:
			t.Fatalf("unexpected %s", m.Name())
		}
	}
	if seen[len(seen)-1] != "ack" || !strings.Contains(strings.Join(seen, ","), "return") {
		t.Fatalf("sequence %v", seen)
	}
	if len(seen) > 4 {
		t.Fatalf("acks were not coalesced: %v", seen)
	}
}

func TestMethods_ImmediateIsRefused(t *testing.T) {
	ts := startServer(t, Config{})
	c, ch := openChannel(t, ts)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	_ = ch.PublishWithContext(context.Background(), "", "q", false, true, amqp091.Publishing{Body: []byte("x")})
	e := mustClosedWith(t, closed, 540)
	if e.Reason != "NOT_IMPLEMENTED - immediate=true" {
		t.Fatalf("reason %q", e.Reason)
	}
}

// A global prefetch (RabbitMQ's deprecated channel-wide QoS) is the limit
// of each consumer without one of its own; a per-consumer prefetch wins
// over it, and the global one is back once that is cleared. Each change
// reaches the consumers already running too.
func TestMethods_GlobalPrefetchLimitsEachConsumer(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	consume := func(queue string) {
		t.Helper()
		if _, err := ch.Consume(queue, queue, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Qos(5, 0, true); err != nil {
		t.Fatal(err)
	}
	consume("a")
	consume("b")
	if err := ch.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	consume("c")
	if err := ch.Qos(0, 0, false); err != nil {
		t.Fatal(err)
	}
	consume("d")
	want := map[string]uint32{"a": 5, "b": 5, "c": 3, "d": 5}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	if len(cons) != len(want) {
		t.Fatalf("%d consumes, want %d", len(cons), len(want))
	}
	for _, c := range cons {
		if c.GetPrefetch() != want[c.GetQueue()] {
			t.Errorf("consumer of %s has prefetch %d, want %d", c.GetQueue(), c.GetPrefetch(), want[c.GetQueue()])
		}
	}
	// Each basic.qos also gave the consumers already running the
	// channel's prefetch, through their logs, each consumer's in the
	// order it was set.
	changed := map[string][]uint32{}
	for _, c := range commandsOf(ts.broker, (*proto.Command).GetCredit) {
		if c.Prefetch != nil {
			changed[c.GetConsumer().GetTag()] = append(changed[c.GetConsumer().GetTag()], c.GetPrefetch())
		}
	}
	if want := map[string][]uint32{"a": {3, 5}, "b": {3, 5}, "c": {5}}; !maps.EqualFunc(changed, want, slices.Equal) {
		t.Errorf("prefetches changed %v, want %v", changed, want)
	}
}

// A basic.qos proposes the prefetch of each running consumer side by
// side: none waits for another's commit, so the qos-ok of a channel with
// many consumers comes after about one commit. The fake's log holds each
// change until all of them are proposed; one at a time, the first would
// wait there alone.
func TestMethods_QosChangesTheConsumersSideBySide(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	const consumers = 4
	for i := range consumers {
		q := fmt.Sprintf("q%d", i)
		if _, err := ch.Consume(q, q, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	arrived, all := 0, make(chan struct{})
	var alone atomic.Int32
	ts.broker.script(nil, func(c *proto.Command) {
		if c.GetCredit().GetPrefetch() == 0 {
			return
		}
		mu.Lock()
		if arrived++; arrived == consumers {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(2 * time.Second):
			alone.Add(1)
		}
	})
	if err := ch.Qos(7, 0, false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if arrived != consumers || alone.Load() != 0 {
		t.Errorf("%d of %d prefetch changes proposed, %d waited alone for the others", arrived, consumers, alone.Load())
	}
}

func TestMethods_ConsumeOkPrecedesDeliveries(t *testing.T) {
	ts := startServer(t, Config{})
	// The node applies the Consume entry and the FSM assigns two ready
	// messages at once: the deliveries reach the Sink before Submit
	// returns, that is before consume-ok could be written.
	ts.broker.script(nil, func(c *proto.Command) {
		if cons := c.GetConsume(); cons != nil {
			for i := 1; i <= 2; i++ {
				ts.srv.Deliver(&fsm.Delivery{
					Consumer: cons.Consumer, DeliveryTag: uint64(i), Exchange: "", RoutingKey: cons.Queue,
					Properties: &proto.Properties{ContentType: ptr("text/plain")}, Body: []byte{byte('0' + i)},
				})
			}
		}
	})
	_, ch := openChannel(t, ts)
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []amqp091.Delivery
	for len(got) < 2 {
		select {
		case d := <-deliveries:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d deliveries of 2", len(got))
		}
	}
	if got[0].DeliveryTag != 1 || string(got[1].Body) != "2" || got[0].ContentType != "text/plain" {
		t.Fatalf("deliveries %+v", got)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	if len(cons) != 1 || cons[0].Prefetch != 10 || cons[0].Queue != "work" || cons[0].Consumer.GetTag() != got[0].ConsumerTag {
		t.Fatalf("consume = %v", cons)
	}
	// Acks of one channel go to the log together.
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := got[1].Nack(true, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "settle and requeue", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetSettle)) == 1 && len(commandsOf(ts.broker, (*proto.Command).GetRequeue)) == 1
	})
	s := commandsOf(ts.broker, (*proto.Command).GetSettle)[0]
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)[0]
	// The log's tags go as a list: the multiple nack names tag 2 alone,
	// the one the client still held.
	if !slices.Equal(s.Tags, []uint64{1}) || !slices.Equal(r.Tags, []uint64{2}) || s.Channel.GetChannel() != 1 {
		t.Fatalf("settle %v requeue %v", s, r)
	}
	if err := ch.Cancel(got[0].ConsumerTag, false); err != nil {
		t.Fatal(err)
	}
	if c := commandsOf(ts.broker, (*proto.Command).GetCancel); len(c) != 1 || c[0].Consumer.GetTag() != got[0].ConsumerTag {
		t.Fatalf("cancel = %v", c)
	}
}

func ptr[T any](v T) *T { return &v }

func TestMethods_AcksAreBatched(t *testing.T) {
	ts := startServer(t, Config{})
	release := make(chan struct{})
	ts.broker.script(nil, func(c *proto.Command) {
		// Hold every acknowledgement so the later ones queue up behind
		// the batches in flight.
		if c.GetSettle() != nil {
			<-release
		}
	})
	_, pch := openChannel(t, ts)
	logTags := make([]uint64, 50)
	for i := range logTags {
		logTags[i] = uint64(101 + i)
	}
	got := consumeLogTags(t, ts, pch, "q", logTags...)
	for _, d := range got {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	// The worker is not held up: it hands every ack to the sender, which
	// has at most maxAckFlights batches in flight and holds the rest.
	ch := ts.srv.lookupFirst().channel(1)
	eventually(t, 5*time.Second, "acks in flight or queued", func() bool {
		n := ch.acks.queued()
		for _, b := range settleBatches(ts.broker) {
			for _, c := range b {
				n += len(c.GetSettle().GetTags())
			}
		}
		return n == 50
	})
	if n := len(settleBatches(ts.broker)); n > maxAckFlights {
		t.Fatalf("%d ack batches in flight, want at most %d", n, maxAckFlights)
	}
	close(release)
	eventually(t, 5*time.Second, "all acks", func() bool { return len(settledTags(ts.broker)) == 50 })
	if n := len(settleBatches(ts.broker)); n > maxAckFlights+1 {
		t.Fatalf("50 acks went in %d batches, want what queued behind the flights in one", n)
	}
}

// settledTags returns the tags of every Settle submitted, in order.
func settledTags(b *fakeBroker) []uint64 {
	var out []uint64
	for _, s := range commandsOf(b, (*proto.Command).GetSettle) {
		out = append(out, s.GetTags()...)
	}
	return out
}

// settleBatches returns the submissions that carried acknowledgements.
func settleBatches(b *fakeBroker) [][]*proto.Command {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out [][]*proto.Command
	for _, batch := range b.batches {
		if len(batch) > 0 && batch[0].GetSettle() != nil {
			out = append(out, batch)
		}
	}
	return out
}

// A client that acks and then closes its connection gets its acks into the
// log before the close, which would otherwise requeue those messages.
func TestMethods_AcksPrecedeTheConnectionClose(t *testing.T) {
	ts := startServer(t, Config{CloseTimeout: 10 * time.Second})
	release := make(chan struct{})
	var settled, closedAfterSettle atomic.Bool
	closeSeen := make(chan struct{})
	ts.broker.script(nil, func(c *proto.Command) {
		switch {
		case c.GetSettle() != nil:
			<-release
			settled.Store(true)
		case c.GetConnectionClosed() != nil:
			closedAfterSettle.Store(settled.Load())
			close(closeSeen)
		}
	})
	conn, pch := openChannel(t, ts)
	got := consumeLogTags(t, ts, pch, "q", 101)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the ack in flight", func() bool { return len(commandsOf(ts.broker, (*proto.Command).GetSettle)) == 1 })
	ch := ts.srv.lookupFirst().channel(1)
	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	eventually(t, 5*time.Second, "the channel ending", ch.acks.isEnding)
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	<-closeSeen
	if !closedAfterSettle.Load() {
		t.Fatal("ConnectionClosed went to the log while an ack before it was in flight")
	}
}

func (a *ackSender) isEnding() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ending
}

// flushing reports whether the worker waits for the acks ahead of a method.
func (a *ackSender) flushing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiting
}

func (a *ackSender) queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// While acks wait for the log, the channel's publishes go on, and any
// other method waits until the acks are answered, so it follows them in
// the log.
func TestMethods_AcksDoNotHoldUpPublishesButPrecedeTheRest(t *testing.T) {
	ts := startServer(t, Config{})
	release := make(chan struct{})
	ts.broker.script(nil, func(c *proto.Command) {
		if s := c.GetSettle(); s != nil && slices.Equal(s.Tags, []uint64{101}) {
			<-release
		}
	})
	_, pch := openChannel(t, ts)
	got := consumeLogTags(t, ts, pch, "q", 101, 102)
	if err := pch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the ack in flight", func() bool { return len(commandsOf(ts.broker, (*proto.Command).GetSettle)) == 1 })
	if err := pch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatalf("publish nacked: %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a publish waited for the channel's ack to commit")
	}
	recovered := make(chan error, 1)
	go func() { recovered <- pch.Recover(true) }()
	ch := ts.srv.lookupFirst().channel(1)
	eventually(t, 5*time.Second, "basic.recover waiting for the ack", ch.acks.flushing)
	if n := len(commandsOf(ts.broker, (*proto.Command).GetRequeue)); n != 0 {
		t.Fatalf("basic.recover reached the log (%d requeues) ahead of the ack before it", n)
	}
	close(release)
	if err := <-recovered; err != nil {
		t.Fatal(err)
	}
	if rq := commandsOf(ts.broker, (*proto.Command).GetRequeue); len(rq) != 1 || !slices.Equal(rq[0].GetTags(), []uint64{102}) {
		t.Fatalf("recover requeued %v, want the unacknowledged 102", rq)
	}
}

func (s *Server) lookupFirst() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		return c
	}
	return nil
}

func TestMethods_Get(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if g := c.GetGet(); g != nil && g.Queue == "full" {
			return &proto.Result{Get: &proto.GetOk{DeliveryTag: 9, Redelivered: true, Exchange: "ex", RoutingKey: "rk", MessageCount: 4,
				Properties: &proto.Properties{MessageId: ptr("m-1")}, Body: []byte("payload")}}
		}
		return nil
	}, nil)
	_, ch := openChannel(t, ts)
	d, ok, err := ch.Get("full", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if d.DeliveryTag != 1 || !d.Redelivered || d.Exchange != "ex" || d.RoutingKey != "rk" || d.MessageCount != 4 || d.MessageId != "m-1" || string(d.Body) != "payload" {
		t.Fatalf("get-ok = %+v", d)
	}
	// Its ack names the log's tag.
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "ack of the get", func() bool {
		s := commandsOf(ts.broker, (*proto.Command).GetSettle)
		return len(s) == 1 && slices.Equal(s[0].Tags, []uint64{9})
	})
	_, ok, err = ch.Get("empty", true)
	if err != nil || ok {
		t.Fatalf("get-empty: %v %v", ok, err)
	}
	gets := commandsOf(ts.broker, (*proto.Command).GetGet)
	if len(gets) != 2 || gets[0].NoAck || !gets[1].NoAck || gets[0].Channel.GetChannel() != 1 {
		t.Fatalf("gets = %v", gets)
	}
}

func TestMethods_ServerCancelsConsumer(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	cancels := ch.NotifyCancel(make(chan string, 1))
	if _, err := ch.Consume("q", "my-tag", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	if len(cons) != 1 || !cons[0].NoAck {
		t.Fatalf("consume = %v", cons)
	}
	ts.srv.ConsumerCancelled(cons[0].Consumer)
	select {
	case tag := <-cancels:
		if tag != "my-tag" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel")
	}
}

func TestMethods_ConsumerTagReuse(t *testing.T) {
	ts := startServer(t, Config{})
	c, ch := openChannel(t, ts)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	if _, err := ch.Consume("q", "t", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, _ = ch.Consume("q", "t", false, false, false, false, nil)
	mustClosedWith(t, closed, 530)
}

func TestMethods_RecoverAndClose(t *testing.T) {
	ts := startServer(t, Config{})
	c, ch := openChannel(t, ts)
	ch2, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	got := consumeLogTags(t, ts, ch, "q", 5, 6, 7)
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	// Recover requeues, by name, what the client still held.
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)
	if len(r) != 1 || !slices.Equal(r[0].Tags, []uint64{6, 7}) || r[0].Unseen {
		t.Fatalf("requeue = %v, want log tags 6 and 7", r)
	}

	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if cc := commandsOf(ts.broker, channelClosed); len(cc) != 1 || cc[0].Channel.GetChannel() != 1 || cc[0].Channel.GetNode() != "node-a" {
		t.Fatalf("channel closed = %v", cc)
	}
	if _, _, err := ch2.Get("q", false); err != nil {
		t.Fatal(err)
	}
	if err := ch2.Close(); err != nil {
		t.Fatal(err)
	}
	if cc := commandsOf(ts.broker, channelClosed); len(cc) != 2 || cc[1].Channel.GetChannel() != 2 {
		t.Fatalf("channel closed = %v", cc)
	}
	_ = c.Close()
	eventually(t, 5*time.Second, "ConnectionClosed", func() bool { return len(commandsOf(ts.broker, connectionClosed)) == 1 })
}

func TestMethods_LastDeclaredQueue(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0)
	rc.send(1, &wire.ChannelOpen{})
	rc.method()
	rc.send(1, &wire.QueueDeclare{Queue: "named"})
	rc.method()
	rc.send(1, &wire.QueueBind{Exchange: "amq.direct"})
	if m := rc.method(); m.Name() != "queue.bind-ok" {
		t.Fatalf("got %s", m.Name())
	}
	b := commandsOf(ts.broker, (*proto.Command).GetBind)
	if len(b) != 1 || b[0].Destination != "named" || b[0].RoutingKey != "named" {
		t.Fatalf("bind = %v", b)
	}
	// A server-named consumer tag.
	rc.send(1, &wire.BasicConsume{Queue: "named"})
	if ok, _ := rc.method().(*wire.BasicConsumeOk); ok == nil || !strings.HasPrefix(ok.ConsumerTag, "amq.ctag-") {
		t.Fatalf("consume-ok = %#v", ok)
	}
	// Without a declared queue an empty name is a connection error.
	rc.send(2, &wire.ChannelOpen{})
	rc.method()
	rc.send(2, &wire.BasicGet{})
	rc.expectConnectionClose(replycode.NotAllowed)
}

// RabbitMQ refuses basic.recover with requeue=false as not implemented, a
// connection exception.
func TestMethods_RecoverWithoutRequeueIsRefused(t *testing.T) {
	ts := startServer(t, Config{})
	c, ch := openChannel(t, ts)
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	_ = ch.Recover(false)
	if e := mustClosedWith(t, closed, 540); e.Reason != "NOT_IMPLEMENTED - requeue=false" {
		t.Fatalf("reason %q", e.Reason)
	}
	if r := commandsOf(ts.broker, (*proto.Command).GetRequeue); len(r) != 0 {
		t.Fatalf("requeue submitted: %v", r)
	}
}

// A node that applies an assignment long after the message's deadline (it
// was catching up on the log) does not hand the client a dead message: it
// requeues it unseen, and the log kills it. Deliveries in time, and no-ack
// deliveries (settled already), are written.
func TestMethods_OverdueDeliveryIsRequeuedUnseen(t *testing.T) {
	ts := startServer(t, Config{})
	var consumer *proto.ConsumerRef
	ts.broker.script(nil, func(c *proto.Command) {
		if cons := c.GetConsume(); cons != nil {
			consumer = cons.Consumer
		}
	})
	_, ch := openChannel(t, ts)
	deliveries, err := ch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	late := now - 5000
	for i, d := range []*fsm.Delivery{
		{DeliveryTag: 1, Deadline: late},
		{DeliveryTag: 2, Deadline: now + 60000},
		{DeliveryTag: 3, Deadline: late, NoAck: true},
		{DeliveryTag: 4, Deadline: ttl.NoDeadline},
	} {
		d.Consumer, d.RoutingKey, d.Body = consumer, "work", []byte{byte('1' + i)}
		ts.srv.Deliver(d)
	}
	var tags []uint64
	for len(tags) < 3 {
		select {
		case d := <-deliveries:
			tags = append(tags, d.DeliveryTag)
		case <-time.After(5 * time.Second):
			t.Fatalf("deliveries %v, want 2, 3, 4", tags)
		}
	}
	// The wire numbers what was written: 1, 2, 3 are the log's 2, 3, 4.
	if !slices.Equal(tags, []uint64{1, 2, 3}) {
		t.Fatalf("delivered tags %v, want 1, 2, 3 (log tag 1 was overdue)", tags)
	}
	eventually(t, 5*time.Second, "requeue of the overdue delivery", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetRequeue)) == 1
	})
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)[0]
	if !slices.Equal(r.Tags, []uint64{1}) || !r.Unseen || r.Channel.GetChannel() != 1 {
		t.Fatalf("requeue %v, want log tag 1 alone, unseen, on channel 1", r)
	}
}

// Methods a client sent before its connection.close are handled before the
// connection ends, as RabbitMQ does, even when they still wait behind a
// method in hand when the close arrives: acks the worker dropped then were
// requeued by the close (the consumer's next connection got them again),
// and a publish dropped then was lost. The worker picks between its queue
// and the close at random, so a dropped method shows within a few rounds.
func TestMethods_MethodsQueuedBeforeTheConnectionCloseAreHandled(t *testing.T) {
	for round := range 8 {
		ts := startServer(t, Config{CloseTimeout: 10 * time.Second})
		release := make(chan struct{})
		var (
			mu          sync.Mutex
			settled     []uint64
			published   int
			afterClosed []string
			closed      bool
		)
		ts.broker.script(nil, func(c *proto.Command) {
			if c.GetSettle() != nil && len(c.GetSettle().GetTags()) == 1 && c.GetSettle().GetTags()[0] == 101 {
				<-release
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.GetConnectionClosed() != nil:
				closed = true
			case closed:
				afterClosed = append(afterClosed, fmt.Sprintf("%T", c.GetCmd()))
			case c.GetSettle() != nil:
				settled = append(settled, c.GetSettle().GetTags()...)
			case c.GetPublish() != nil:
				published++
			}
		})
		conn, pch := openChannel(t, ts)
		got := consumeLogTags(t, ts, pch, "q", 101, 102, 103, 104, 105)
		ch := ts.srv.lookupFirst().channel(1)
		if err := got[0].Ack(false); err != nil {
			t.Fatal(err)
		}
		// The first ack is held in the log; a qos waits for it, in the
		// worker's hand, while the rest queue behind it.
		go func() { _ = pch.Qos(10, 0, false) }()
		eventually(t, 5*time.Second, "the worker waiting on the held ack", ch.acks.flushing)
		for _, d := range got[1:] {
			if err := d.Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		if err := pch.Publish("", "q", false, false, amqp091.Publishing{Body: []byte("last words")}); err != nil {
			t.Fatal(err)
		}
		// Four acks and the publish.
		eventually(t, 5*time.Second, "the acks and the publish queued", func() bool { return len(ch.in) == len(got[1:])+1 })
		done := make(chan error, 1)
		go func() { done <- conn.Close() }()
		eventually(t, 5*time.Second, "the close arriving", func() bool {
			select {
			case <-ch.quit:
				return true
			default:
				return false
			}
		})
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(settled) != len(got) || published != 1 || !closed || len(afterClosed) > 0 {
			t.Errorf("round %d: settled %v and %d publish before ConnectionClosed (seen %v), then %v; want the 5 tags and 1 publish, then nothing",
				round, settled, published, closed, afterClosed)
		}
		mu.Unlock()
	}
}
