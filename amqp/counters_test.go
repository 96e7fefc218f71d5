package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
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
	if got != (Counters{ConnectionsOpened: 1, ChannelsOpened: 2, ChannelsClosed: 1, Confirmed: 3}) {
		t.Fatalf("counters while open %+v", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "connection closed", func() bool {
		return ts.srv.Counters() == Counters{ConnectionsOpened: 1, ConnectionsClosed: 1, ChannelsOpened: 2, ChannelsClosed: 2, Confirmed: 3}
	})
}
