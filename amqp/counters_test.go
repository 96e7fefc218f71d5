package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

// TestServer_Counters: connections and channels opened and closed (a
// channel closed with its connection included) and every message
// confirmed, one per message even when the acks are coalesced.
func TestServer_Counters(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	ch1, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Channel(); err != nil {
		t.Fatal(err)
	}
	if err := ch1.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch1.NotifyPublish(make(chan amqp091.Confirmation, 3))
	for range 3 {
		if err := ch1.Publish("", "nowhere", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		select {
		case cf := <-confirms:
			if !cf.Ack {
				t.Fatalf("nacked %d", cf.DeliveryTag)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no confirm")
		}
	}
	if err := ch1.Close(); err != nil {
		t.Fatal(err)
	}
	got := ts.srv.Counters()
	// "nowhere" is no queue: the three were dropped as unroutable.
	if got != (Counters{ConnectionsOpened: 1, ChannelsOpened: 2, ChannelsClosed: 1, Confirmed: 3, Dropped: 3}) {
		t.Fatalf("counters while open %+v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "connection closed", func() bool {
		return ts.srv.Counters() == Counters{ConnectionsOpened: 1, ConnectionsClosed: 1, ChannelsOpened: 2, ChannelsClosed: 2, Confirmed: 3, Dropped: 3}
	})
}

// TestServer_CountersUnroutableGetDeclare: a mandatory publish routed
// nowhere is counted returned, one routed to a queue neither returned nor
// dropped, an empty basic.get counted, and every queue.declare but the
// passive ones counted, a redeclaration too.
func TestServer_CountersUnroutableGetDeclare(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.answer = func(cmd *proto.Command) *proto.Result {
		if p := cmd.GetPublish(); p != nil && p.GetRoutingKey() == "q" {
			return &proto.Result{Routed: true}
		}
		return nil
	}
	c := dial(t, ts)
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 2))
	// Confirms tell when both publishes are through.
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 2))
	for range 2 {
		if _, err := ch.QueueDeclare("q", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclarePassive("q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"nowhere", "q"} {
		if err := ch.Publish("", key, true, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-confirms:
		case <-time.After(5 * time.Second):
			t.Fatal("no confirm")
		}
	}
	// basic.return precedes the publish's basic.ack.
	select {
	case r := <-returns:
		if r.RoutingKey != "nowhere" {
			t.Fatalf("returned %q", r.RoutingKey)
		}
	default:
		t.Fatal("no basic.return before the confirm")
	}
	if _, ok, err := ch.Get("q", true); err != nil || ok {
		t.Fatalf("get: ok %v err %v", ok, err)
	}
	got := ts.srv.Counters()
	if got.Returned != 1 || got.Dropped != 0 || got.GetEmpty != 1 || got.QueuesDeclared != 2 {
		t.Fatalf("counters %+v", got)
	}
}
