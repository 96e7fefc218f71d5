package amqp

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/internal/replycode"
	"github.com/raftmq/raftmq/proto"
)

// The log's ChannelTimedOut closes the channel with RabbitMQ's 406 and
// text; the connection and its other channels stay, and the close-ok
// records the channel's end in the log.
func TestConsumerTimeout_ClosesTheChannelWithRabbitMQsError(t *testing.T) {
	ts := startServer(t, Config{})
	conn, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	connClosed := conn.NotifyClose(make(chan *amqp091.Error, 1))
	other, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	consumeLogTags(t, ts, ch, "q", 1)
	ref := commandsOf(ts.broker, (*proto.Command).GetConsume)[0].Consumer.GetChannel()
	ts.srv.ChannelTimedOut(&proto.ChannelRef{Node: ref.GetNode(), Connection: ref.GetConnection(), Channel: ref.GetChannel() + 10}, 500)
	ts.srv.ChannelTimedOut(&proto.ChannelRef{Node: "another-node", Connection: ref.GetConnection(), Channel: ref.GetChannel()}, 500)
	ts.srv.ChannelTimedOut(ref, 500)
	e := mustClosedWith(t, closed, 406)
	want := "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 500 ms. " +
		"This timeout value can be configured, see consumers doc guide to learn more"
	if e.Reason != want || e.Server != true {
		t.Fatalf("closed with %q (server %v), want %q", e.Reason, e.Server, want)
	}
	if _, err := other.QueueDeclare("still-open", false, false, false, false, nil); err != nil {
		t.Fatalf("another channel of the connection: %v", err)
	}
	eventually(t, 5*time.Second, "the channel's end in the log", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetChannelClosed)) == 1
	})
	select {
	case err := <-connClosed:
		t.Fatalf("the connection closed: %v", err)
	default:
	}
}

// timeoutReason is RabbitMQ's text of a consumer timeout's channel.close.
func timeoutReason(channel int, ms int64) string {
	return fmt.Sprintf("PRECONDITION_FAILED - delivery acknowledgement on channel %d timed out. Timeout value used: %d ms. "+
		"This timeout value can be configured, see consumers doc guide to learn more", channel, ms)
}

// From protocol level 10 the log's ConsumerTimedOut cancels one consumer:
// a client with consumer_cancel_notify (amqp091-go announces it) gets
// basic.cancel for it, as from RabbitMQ 4.3, and the channel stays with
// its other consumer. The late ack of a delivery the log took back is
// ignored, as RabbitMQ 4.3 ignores it, and never reaches the log.
func TestConsumerTimeout_CancelsTheConsumerOfAClientWithTheCapability(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	cancels := ch.NotifyCancel(make(chan string, 2))
	slow, err := ch.Consume("q", "slow", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := ch.Consume("r", "fast", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	slowRef, fastRef := cons[0].Consumer, cons[1].Consumer
	ts.srv.Deliver(&fsm.Delivery{Consumer: slowRef, DeliveryTag: 1, RoutingKey: "q", Body: []byte("a")})
	ts.srv.Deliver(&fsm.Delivery{Consumer: fastRef, DeliveryTag: 2, RoutingKey: "r", Body: []byte("x")})
	ts.srv.Deliver(&fsm.Delivery{Consumer: slowRef, DeliveryTag: 3, RoutingKey: "q", Body: []byte("b")})
	next := func(ds <-chan amqp091.Delivery, what string) amqp091.Delivery {
		t.Helper()
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("%s: the consumer ended", what)
			}
			return d
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no delivery", what)
		}
		return amqp091.Delivery{}
	}
	a, x, b := next(slow, "slow"), next(fast, "fast"), next(slow, "slow")

	ts.srv.ConsumerTimedOut(&proto.ConsumerRef{Channel: slowRef.GetChannel(), Tag: "other"}, 500, nil)
	ts.srv.ConsumerTimedOut(slowRef, 500, []uint64{1, 3})
	select {
	case tag := <-cancels:
		if tag != "slow" {
			t.Fatalf("basic.cancel for %q, want slow", tag)
		}
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.cancel")
	}
	// Late acks of the deliveries taken back, then the other consumer's.
	for _, d := range []amqp091.Delivery{a, b, x} {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the other consumer's ack in the log", func() bool { return len(settledTags(ts.broker)) > 0 })
	if got := settledTags(ts.broker); len(got) != 1 || got[0] != 2 {
		t.Fatalf("settled log tags %v, want only the other consumer's 2", got)
	}
	ts.srv.Deliver(&fsm.Delivery{Consumer: fastRef, DeliveryTag: 4, RoutingKey: "r", Body: []byte("y")})
	if d := next(fast, "fast after the timeout"); string(d.Body) != "y" || d.DeliveryTag != 4 {
		t.Fatalf("the other consumer got %q with wire tag %d", d.Body, d.DeliveryTag)
	}
	if _, err := ch.QueueDeclare("still-open", false, false, false, false, nil); err != nil {
		t.Fatalf("the channel after the timeout: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	case tag := <-cancels:
		t.Fatalf("a second basic.cancel, for %q", tag)
	default:
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetChannelClosed)); n != 0 {
		t.Fatalf("%d ChannelClosed submitted", n)
	}
}

// A client that does not announce consumer_cancel_notify cannot be told
// its consumer was cancelled: its channel is closed with RabbitMQ's 406,
// as before level 10 and in RabbitMQ 4.3, and the close-ok ends the
// channel in the log (which requeues what its other consumers held).
func TestConsumerTimeout_ClosesTheChannelOfAClientWithoutTheCapability(t *testing.T) {
	ts := startServer(t, Config{})
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0) // announces no capabilities
	rc.send(1, &wire.ChannelOpen{})
	if m := rc.method(); m.Name() != "channel.open-ok" {
		t.Fatalf("got %s", m.Name())
	}
	for _, c := range [][2]string{{"q", "slow"}, {"r", "fast"}} {
		rc.send(1, &wire.BasicConsume{Queue: c[0], ConsumerTag: c[1]})
		if m := rc.method(); m.Name() != "basic.consume-ok" {
			t.Fatalf("got %s", m.Name())
		}
	}
	slowRef := commandsOf(ts.broker, (*proto.Command).GetConsume)[0].Consumer
	ts.srv.ConsumerTimedOut(slowRef, 500, nil)
	m := rc.method()
	cl, ok := m.(*wire.ChannelClose)
	if !ok {
		t.Fatalf("got %s, want channel.close", m.Name())
	}
	if cl.ReplyCode != 406 || cl.ReplyText != timeoutReason(1, 500) {
		t.Fatalf("channel.close %d %q, want 406 %q", cl.ReplyCode, cl.ReplyText, timeoutReason(1, 500))
	}
	rc.send(1, &wire.ChannelCloseOk{})
	eventually(t, 5*time.Second, "the channel's end in the log", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetChannelClosed)) == 1
	})
	// The connection stays.
	rc.send(2, &wire.ChannelOpen{})
	if m := rc.method(); m.Name() != "channel.open-ok" {
		t.Fatalf("got %s", m.Name())
	}
}

// A consumer timeout takes back what the consumer was written and what
// its window held (the log requeued both): nothing goes back unseen a
// second time, the late ack of a taken-back tag names nothing (once), a
// multiple ack over it settles the others, and an unknown tag is still
// RabbitMQ's 406. Another consumer's deliveries stay.
func TestLedger_ConsumerTimeoutTakesBackTheConsumersDeliveries(t *testing.T) {
	l := started(t, []string{"other"}, []string{"slow"})
	// slow: log 1 and 2 written (wire 1, 2), log 4 held; other: log 3 (wire 3).
	if got := feed(l, t0, dl("slow", 1, 0), dl("slow", 2, 0), dl("other", 3, 0), dl("slow", 4, 0)); len(got) != 3 {
		t.Fatalf("written %v", got)
	}
	if !l.timedOut("slow", []uint64{1, 2, 4}) {
		t.Fatal("slow not known")
	}
	if l.timedOut("slow", nil) || l.tagInUse("slow") {
		t.Fatal("slow still the channel's")
	}
	if got := l.takeOverdue(); len(got) != 0 {
		t.Fatalf("withheld for an unseen requeue %v: the log took them back", got)
	}
	ack := func(tag uint64, multiple bool) ([]logRef, *wire.Error) {
		tags, _, _, e := l.ack(&wire.BasicAck{DeliveryTag: tag, Multiple: multiple}, false, t0)
		return tags, e
	}
	if tags, e := ack(1, false); e != nil || len(tags) != 0 {
		t.Fatalf("late ack of a taken-back tag: %v %v", tags, e)
	}
	if _, e := ack(1, false); e == nil || e.Code != replycode.PreconditionFailed {
		t.Fatalf("a second ack of it: %v, want 406", e)
	}
	if tags, e := ack(3, true); e != nil || !slices.Equal(tags, g0(3)) {
		t.Fatalf("multiple ack over a taken-back tag: %v %v", tags, e)
	}
	if _, e := ack(9, false); e == nil || e.Code != replycode.PreconditionFailed {
		t.Fatalf("unknown tag: %v, want 406", e)
	}
	if l.wasReclaimed(0, []uint64{3}) || !l.wasReclaimed(0, []uint64{3, 4}) {
		t.Fatal("wasReclaimed")
	}
}

// An ack the client sent as the timeout was applied reaches the log after
// it and is refused there (the delivery is no longer the channel's): it
// is ignored, as a late ack, and the channel stays.
func TestConsumerTimeout_AckRefusedAfterTheTimeoutIsIgnored(t *testing.T) {
	ts, ch, closed, ds, ref := consumerOfTwo(t)
	refuseSettlesOf(ts, 1)
	ts.broker.mu.Lock()
	ts.broker.onSubmit = func(cmd *proto.Command) {
		if s := cmd.GetSettle(); s != nil && slices.Contains(s.GetTags(), 1) {
			// The timeout's entry came first.
			ts.srv.ConsumerTimedOut(ref, 500, []uint64{1, 2})
		}
	}
	ts.broker.mu.Unlock()
	if err := ds[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the ack in the log", func() bool { return len(settledTags(ts.broker)) > 0 })
	if err := ds[1].Ack(false); err != nil { // a late ack: the timeout is known now
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("still-open", false, false, false, false, nil); err != nil {
		t.Fatalf("the channel after a refused late ack: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	default:
	}
	if got := settledTags(ts.broker); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("settled %v, want the one refused ack only", got)
	}
}

// A consumer whose delivery timed out before its consume-ok was written
// (a timeout of 0) is told once, after the consume-ok.
func TestLedger_ConsumerTimeoutBeforeConsumeOk(t *testing.T) {
	l := newLedger()
	l.startConsume("c", 0, 0)
	feed(l, t0, dl("c", 1, 0)) // waits for consume-ok
	if l.timedOut("c", []uint64{1}) {
		t.Fatal("a starting consumer reported known: basic.cancel would precede consume-ok")
	}
	if active, a := l.consumed("c", true); active || len(a.writes) != 0 {
		t.Fatalf("after consume-ok: active %v, writes %v", active, writes(a))
	}
}

// In a transaction an ack is read when it arrives and sent at tx.commit;
// a consumer timeout in between took its delivery back: the commit goes
// through, the late ack ignored.
func TestConsumerTimeout_AckInATransactionCommittedAfterTheTimeout(t *testing.T) {
	ts, ch, closed, ds, ref := consumerOfTwo(t)
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	// Ordered after the acks' reading: a method waits for them.
	if _, err := ch.QueueDeclare("after-acks", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ts.srv.ConsumerTimedOut(ref, 500, []uint64{1})
	refuseSettlesOf(ts, 1)
	ts.broker.mu.Lock()
	ts.broker.unacked = func(_ *proto.ChannelRef, tags []uint64) []uint64 {
		return slices.DeleteFunc(slices.Clone(tags), func(t uint64) bool { return t == 1 })
	}
	ts.broker.mu.Unlock()
	if err := ch.TxCommit(); err != nil {
		t.Fatalf("tx.commit: %v", err)
	}
	select {
	case e := <-closed:
		t.Fatalf("the channel closed: %v", e)
	default:
	}
	if got := settledTags(ts.broker); !slices.Contains(got, 2) {
		t.Fatalf("settled %v: the ack of 2 was lost", got)
	}
}

// refuseSettlesOf has the log refuse every Settle naming log tag, as it
// refuses one whose delivery a consumer timeout took back.
func refuseSettlesOf(ts *testServer, tag uint64) {
	ts.broker.mu.Lock()
	defer ts.broker.mu.Unlock()
	ts.broker.answer = func(cmd *proto.Command) *proto.Result {
		if s := cmd.GetSettle(); s != nil && slices.Contains(s.GetTags(), tag) {
			return &proto.Result{Code: 406, Text: fmt.Sprintf("PRECONDITION_FAILED - unknown delivery tag %d", tag)}
		}
		return nil
	}
}

// consumerOfTwo starts a server with a consumer of q that got log tags 1
// and 2; it returns the channel, its close notification, the deliveries
// and the consumer.
func consumerOfTwo(t *testing.T) (*testServer, *amqp091.Channel, chan *amqp091.Error, []amqp091.Delivery, *proto.ConsumerRef) {
	t.Helper()
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ds := consumeLogTags(t, ts, ch, "q", 1, 2)
	return ts, ch, closed, ds, commandsOf(ts.broker, (*proto.Command).GetConsume)[0].Consumer
}
