package amqp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/raftmq/raftmq/fsm"
	"github.com/raftmq/raftmq/proto"
)

// miniQueue is a one-queue broker: publishes go straight to the consumer
// registered last, as the state machine's effects would.
type miniQueue struct {
	mu       sync.Mutex
	srv      *Server
	consumer *proto.ConsumerRef
	tag      uint64
}

func (q *miniQueue) answer(c *proto.Command) *proto.Result {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case c.GetConsume() != nil:
		q.consumer = c.GetConsume().Consumer
	case c.GetPublish() != nil:
		if q.consumer == nil {
			return &proto.Result{Routed: false}
		}
		p := c.GetPublish()
		q.tag++
		// Effects reach the Sink while the entry is applied, before Submit
		// returns, from whatever goroutine applies.
		q.srv.Deliver(&fsm.Delivery{Consumer: q.consumer, DeliveryTag: q.tag, RoutingKey: p.RoutingKey, Properties: p.Properties, Body: p.Body})
		return &proto.Result{Routed: true}
	}
	return nil
}

func TestFlow_ManyPublishersOneConsumer(t *testing.T) {
	ts := startServer(t, Config{})
	q := &miniQueue{srv: ts.srv}
	ts.broker.script(q.answer, nil)

	_, cch := openChannel(t, ts)
	deliveries, err := cch.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const publishers, each = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := 0; p < publishers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			c, err := amqp091.Dial(ts.url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			ch, err := c.Channel()
			if err != nil {
				errs <- err
				return
			}
			if err := ch.Confirm(false); err != nil {
				errs <- err
				return
			}
			for i := 0; i < each; i++ {
				dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", "q", true, false,
					amqp091.Publishing{Headers: amqp091.Table{"p": int32(p)}, Body: []byte(fmt.Sprintf("%d:%d", p, i))})
				if err != nil {
					errs <- err
					return
				}
				if i == each-1 {
					if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
						errs <- fmt.Errorf("last confirm: %v %v", ok, err)
					}
				}
			}
		}(p)
	}
	next := make([]int, publishers)
	deadline := time.After(20 * time.Second)
	for got := 0; got < publishers*each; got++ {
		select {
		case d := <-deliveries:
			var p, i int
			if _, err := fmt.Sscanf(string(d.Body), "%d:%d", &p, &i); err != nil {
				t.Fatalf("body %q", d.Body)
			}
			if d.Headers["p"] != int32(p) || i != next[p] {
				t.Fatalf("delivery %q out of order or with wrong headers %v (want %d)", d.Body, d.Headers, next[p])
			}
			next[p]++
			if d.DeliveryTag%50 == 0 {
				if err := d.Ack(true); err != nil {
					t.Fatal(err)
				}
			}
		case err := <-errs:
			t.Fatal(err)
		case <-deadline:
			t.Fatalf("received %d of %d", got, publishers*each)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "acks", func() bool {
		return len(settledTags(ts.broker)) == publishers*each
	})
}
