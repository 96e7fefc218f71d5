package amqp

import (
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
	"github.com/raftmq/raftmq/ttl"
)

func TestConsumerCredit(t *testing.T) {
	for _, c := range []struct {
		prefetch uint32
		noAck    bool
		factor   int
		want     uint32
	}{
		{100, false, 4, 500},
		{10, false, 2, 30},
		{9, false, 4, 9},     // small prefetch: fair dispatch, no look-ahead
		{1, false, 4, 1},     //
		{0, false, 4, 0},     // unlimited stays unlimited
		{100, true, 4, 100},  // no-ack consumers have no credit to return
		{100, false, 0, 100}, // off
		{1000, false, 4, 3000},
	} {
		if got := consumerCredit(c.prefetch, c.noAck, c.factor); got != c.want {
			t.Errorf("credit(%d, noAck=%v, x%d) = %d, want %d", c.prefetch, c.noAck, c.factor, got, c.want)
		}
	}
}

// windowConsumer starts a server with look-ahead factor and a consumer
// "c" of queue "q" with prefetch 10.
func windowConsumer(t *testing.T, factor int) (*testServer, *amqp091.Connection, *amqp091.Channel, <-chan amqp091.Delivery) {
	t.Helper()
	ts := startServer(t, Config{ConsumerLookahead: factor})
	conn, ch := openChannel(t, ts)
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("q", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ts, conn, ch, ds
}

// receive reads n deliveries.
func receive(t *testing.T, ds <-chan amqp091.Delivery, n int) []amqp091.Delivery {
	t.Helper()
	var got []amqp091.Delivery
	for len(got) < n {
		select {
		case d := <-ds:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d deliveries", len(got), n)
		}
	}
	return got
}

// windowOf returns (written, held) of consumer tag on channel 1.
func windowOf(ts *testServer, consumer string) (uint32, int) {
	ch := ts.srv.lookupFirst().channel(1)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	w := ch.led.windows[consumer]
	if w == nil {
		return 0, -1
	}
	return w.inflight, len(w.held)
}

func lastSettleTags(ts *testServer) []uint64 {
	s := commandsOf(ts.broker, (*proto.Command).GetSettle)
	if len(s) == 0 {
		return nil
	}
	return s[len(s)-1].Tags
}

// A consumer with look-ahead is assigned prefetch × (1 + factor) by the
// log; its node writes prefetch of them and one more per ack, before the
// ack reaches the log.
func TestWindow_HoldsBeyondPrefetchAndRefillsOnAck(t *testing.T) {
	ts, _, ch, ds := windowConsumer(t, 2)
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	if len(cons) != 1 || cons[0].Prefetch != 10 || cons[0].Credit != 30 {
		t.Fatalf("consume %v, want prefetch 10 credit 30", cons)
	}
	for tag := uint64(1); tag <= 30; tag++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: cons[0].Consumer, DeliveryTag: tag, RoutingKey: "q", Body: []byte{byte(tag)}})
	}
	got := receive(t, ds, 10)
	if inflight, held := windowOf(ts, "c"); inflight != 10 || held != 20 {
		t.Fatalf("written %d held %d, want 10 and 20", inflight, held)
	}
	if err := got[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	next := receive(t, ds, 1)[0]
	if next.DeliveryTag != 11 || next.Body[0] != 11 {
		t.Fatalf("after one ack: tag %d body %d, want 11", next.DeliveryTag, next.Body[0])
	}
	eventually(t, 5*time.Second, "settle of log tag 1", func() bool { return slices.Equal(lastSettleTags(ts), []uint64{1}) })
	// A multiple ack returns ten credits at once.
	if err := next.Ack(true); err != nil {
		t.Fatal(err)
	}
	more := receive(t, ds, 10)
	if more[9].Body[0] != 21 {
		t.Fatalf("after acking up to 11: last body %d, want 21", more[9].Body[0])
	}
	eventually(t, 5*time.Second, "settle of log tags 2..11", func() bool {
		return slices.Equal(lastSettleTags(ts), []uint64{2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	})
	// Cancel: what the node still holds goes back unseen.
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "unseen requeue", func() bool { return len(commandsOf(ts.broker, (*proto.Command).GetRequeue)) == 1 })
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)[0]
	if !r.Unseen || !slices.Equal(r.Tags, []uint64{22, 23, 24, 25, 26, 27, 28, 29, 30}) {
		t.Fatalf("requeue %v, want log tags 22..30 unseen", r)
	}
	// Written deliveries stay ackable after the cancel.
	if err := more[9].Ack(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "settle of log tags 12..21", func() bool { return len(lastSettleTags(ts)) == 10 && lastSettleTags(ts)[9] == 21 })
}

// A delivery held for one consumer is written after a later one of
// another consumer of the channel; wire tags follow the writes, so a
// multiple ack never covers a delivery the client has not seen.
func TestWindow_MultipleAckCoversOnlyWhatWasWritten(t *testing.T) {
	ts := startServer(t, Config{ConsumerLookahead: 1})
	_, ch := openChannel(t, ts)
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	a, err := ch.Consume("qa", "a", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	// b has room for its one delivery while a holds its prefetch.
	b, err := ch.Consume("qb", "b", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)
	for tag := uint64(1); tag <= 11; tag++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: cons[0].Consumer, DeliveryTag: tag, RoutingKey: "qa"})
	}
	ts.srv.Deliver(&fsm.Delivery{Consumer: cons[1].Consumer, DeliveryTag: 12, RoutingKey: "qb"})
	gotA := receive(t, a, 10)
	gotB := receive(t, b, 1)
	if gotB[0].DeliveryTag != 11 {
		t.Fatalf("b's delivery is wire tag %d, want 11", gotB[0].DeliveryTag)
	}
	// a's ack lets log tag 11 out, as wire tag 12.
	if err := gotA[0].Ack(false); err != nil {
		t.Fatal(err)
	}
	if d := receive(t, a, 1)[0]; d.DeliveryTag != 12 {
		t.Fatalf("held delivery written as wire tag %d, want 12", d.DeliveryTag)
	}
	// Acks queued together reach the log as one Settle (mergeSettles);
	// the multiple ack is looked at alone once the first has settled.
	eventually(t, 5*time.Second, "settle of log tag 1", func() bool { return slices.Equal(lastSettleTags(ts), []uint64{1}) })
	if err := gotB[0].Ack(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "multiple ack", func() bool { return len(commandsOf(ts.broker, (*proto.Command).GetSettle)) == 2 })
	if got := lastSettleTags(ts); !slices.Equal(got, []uint64{2, 3, 4, 5, 6, 7, 8, 9, 10, 12}) {
		t.Fatalf("ack multiple up to wire 11 settles log tags %v; log tag 11 (wire 12) must stay", got)
	}
	// Acking a tag twice is RabbitMQ's 406.
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := gotA[1].Ack(false); err != nil {
		t.Fatal(err)
	}
	if e := mustClosedWith(t, closed, 406); e.Reason != "PRECONDITION_FAILED - unknown delivery tag 2" {
		t.Fatalf("reason %q", e.Reason)
	}
}

// A held message is still the queue's: at its deadline it goes back to the
// log unseen (which kills it), though its consumer acks nothing, and one
// past its deadline is never written.
func TestWindow_HeldMessagesDieOnTime(t *testing.T) {
	ts, _, _, ds := windowConsumer(t, 1)
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)[0]
	deadline := time.Now().Add(150 * time.Millisecond).UnixMilli()
	for tag := uint64(1); tag <= 14; tag++ {
		d := &fsm.Delivery{Consumer: cons.Consumer, DeliveryTag: tag, RoutingKey: "q", Body: []byte{byte(tag)}, Deadline: ttl.NoDeadline}
		if tag == 12 || tag == 13 {
			d.Deadline = deadline
		}
		ts.srv.Deliver(d)
	}
	got := receive(t, ds, 10)
	eventually(t, 5*time.Second, "unseen requeue of the expired held messages", func() bool {
		return len(commandsOf(ts.broker, (*proto.Command).GetRequeue)) == 1
	})
	if now := time.Now().UnixMilli(); now < deadline {
		t.Fatalf("requeued %d ms before the deadline", deadline-now)
	}
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)[0]
	if !r.Unseen || !slices.Equal(r.Tags, []uint64{12, 13}) {
		t.Fatalf("requeue %v, want log tags 12 and 13 unseen", r)
	}
	// The rest still come in order as the client acks.
	if err := got[9].Ack(true); err != nil {
		t.Fatal(err)
	}
	rest := receive(t, ds, 2)
	if rest[0].Body[0] != 11 || rest[1].Body[0] != 14 {
		t.Fatalf("after the ack: bodies %d and %d, want 11 and 14", rest[0].Body[0], rest[1].Body[0])
	}
}

// basic.recover requeues, by name, what the client holds and what the node
// holds for it; what the log assigns afterwards is delivered as usual.
func TestWindow_RecoverTakesHeldToo(t *testing.T) {
	ts, _, ch, ds := windowConsumer(t, 1)
	cons := commandsOf(ts.broker, (*proto.Command).GetConsume)[0]
	for tag := uint64(1); tag <= 12; tag++ {
		ts.srv.Deliver(&fsm.Delivery{Consumer: cons.Consumer, DeliveryTag: tag, RoutingKey: "q"})
	}
	receive(t, ds, 10)
	if err := ch.Recover(true); err != nil {
		t.Fatal(err)
	}
	r := commandsOf(ts.broker, (*proto.Command).GetRequeue)
	if len(r) != 1 || len(r[0].Tags) != 12 || r[0].Tags[0] != 1 || r[0].Tags[11] != 12 {
		t.Fatalf("requeue %v, want log tags 1..12", r)
	}
	ts.srv.Deliver(&fsm.Delivery{Consumer: cons.Consumer, DeliveryTag: 13, RoutingKey: "q", Redelivered: true})
	d := receive(t, ds, 1)[0]
	if d.DeliveryTag != 11 || !d.Redelivered {
		t.Fatalf("after recover: wire tag %d redelivered %v, want 11, true", d.DeliveryTag, d.Redelivered)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "ack after recover", func() bool { return slices.Equal(lastSettleTags(ts), []uint64{13}) })
}

// Closing the channel, or the connection (the client's close, or the
// server's when it applies its own NodeDown), gives back what the node
// held unseen, before the close requeues the rest flagged redelivered.
func TestWindow_CloseGivesHeldBackUnseen(t *testing.T) {
	for _, what := range []string{"channel", "connection", "own NodeDown"} {
		t.Run(what, func(t *testing.T) {
			ts, conn, ch, ds := windowConsumer(t, 1)
			cons := commandsOf(ts.broker, (*proto.Command).GetConsume)[0]
			for tag := uint64(1); tag <= 12; tag++ {
				ts.srv.Deliver(&fsm.Delivery{Consumer: cons.Consumer, DeliveryTag: tag, RoutingKey: "q"})
			}
			receive(t, ds, 10)
			var err error
			switch what {
			case "channel":
				err = ch.Close()
			case "connection":
				err = conn.Close()
			default:
				closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
				ts.srv.NodeDown(ts.broker.NodeID())
				mustClosedWith(t, closed, amqp091.ConnectionForced)
			}
			if err != nil {
				t.Fatal(err)
			}
			var last []*proto.Command
			eventually(t, 5*time.Second, "the close", func() bool {
				ts.broker.mu.Lock()
				defer ts.broker.mu.Unlock()
				if n := len(ts.broker.batches); n > 0 {
					last = ts.broker.batches[n-1]
				}
				return len(last) == 3
			})
			// The consumer goes first: registered, it would get the
			// requeued messages straight back, and the close would then
			// requeue them flagged redelivered.
			if c := last[0].GetCancel(); c == nil || c.GetConsumer().GetTag() != cons.Consumer.GetTag() {
				t.Fatalf("first of the close's entry: %v, want the cancel of %s", last[0], cons.Consumer.GetTag())
			}
			r := last[1].GetRequeue()
			if r == nil || !r.Unseen || !slices.Equal(r.Tags, []uint64{11, 12}) {
				t.Fatalf("second of the close's entry: %v, want an unseen requeue of 11 and 12", last[1])
			}
			if (what == "channel") != (last[2].GetChannelClosed() != nil) || (what != "channel") != (last[2].GetConnectionClosed() != nil) {
				t.Fatalf("last of the close's entry: %v", last[2])
			}
		})
	}
}
