package amqp

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/proto"
)

// BenchmarkServer_PublishConfirmed measures confirmed 1 KiB publishes
// through the server with a broker that commits at once.
func BenchmarkServer_PublishConfirmed(b *testing.B) {
	ts := startServer(b, Config{})
	ts.broker.script(func(*proto.Command) *proto.Result { return &proto.Result{Routed: true} }, nil)
	c, err := amqp091.Dial(ts.url)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1024))
	body := make([]byte, 1024)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	n := b.N
	done := make(chan int)
	go func() {
		acked := 0
		for i := 0; i < n; i++ {
			if c := <-confirms; c.Ack {
				acked++
			}
		}
		done <- acked
	}()
	for i := 0; i < n; i++ {
		if err := ch.PublishWithContext(context.Background(), "", "q", false, false, amqp091.Publishing{Body: body}); err != nil {
			b.Fatal(err)
		}
	}
	if acked := <-done; acked != n {
		b.Fatalf("%d of %d acked", acked, n)
	}
}
