package amqp

import (
	"context"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/proto"
)

// headerOf is the value of the header key of p's publish, nil when absent.
func headerOf(p *proto.Publish, key string) *proto.Value {
	for _, f := range p.GetProperties().GetHeaders().GetFields() {
		if f.GetKey() == key {
			return f.GetValue()
		}
	}
	return nil
}

// The incoming interceptors give a publish, before it goes to the log,
// the time it reached the node (timestamp_in_ms in ms, the timestamp
// property in seconds) and the node's id (x-routed-by), as RabbitMQ's
// message_interceptors.incoming.set_header_timestamp and
// set_header_routing_node do: keep leaves what the publisher set,
// overwrite replaces it, off adds nothing. A returned message carries
// them too, and so does a publish in a transaction.
func TestInterceptors_StampIncomingPublishes(t *testing.T) {
	for _, mode := range []Stamp{StampOff, StampKeep, StampOverwrite} {
		t.Run(mode.String(), func(t *testing.T) {
			ts := startServer(t, Config{HeaderTimestamp: mode, HeaderRoutingNode: mode})
			ts.broker.script(func(c *proto.Command) *proto.Result {
				if p := c.GetPublish(); p != nil {
					return &proto.Result{Routed: p.GetRoutingKey() != "nowhere"}
				}
				return nil
			}, nil)
			conn, ch := openChannel(t, ts)
			if err := ch.Confirm(false); err != nil {
				t.Fatal(err)
			}
			confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 10))
			returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
			ctx := context.Background()
			before := time.Now()
			own := amqp091.Publishing{Headers: amqp091.Table{"n": int16(3), "timestamp_in_ms": int64(7), "x-routed-by": "elsewhere"},
				Timestamp: time.Unix(1000, 0), Body: []byte("own")}
			for _, p := range []struct {
				key string
				msg amqp091.Publishing
			}{{"q", amqp091.Publishing{Body: []byte("bare")}}, {"q", own}, {"nowhere", amqp091.Publishing{Body: []byte("returned")}}} {
				if err := ch.PublishWithContext(ctx, "", p.key, true, false, p.msg); err != nil {
					t.Fatal(err)
				}
			}
			for range 3 {
				select {
				case <-confirms:
				case <-time.After(5 * time.Second):
					t.Fatal("a confirm did not come")
				}
			}
			tx, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Tx(); err != nil {
				t.Fatal(err)
			}
			if err := tx.PublishWithContext(ctx, "", "q", false, false, amqp091.Publishing{Body: []byte("in a transaction")}); err != nil {
				t.Fatal(err)
			}
			if err := tx.TxCommit(); err != nil {
				t.Fatal(err)
			}
			after := time.Now()

			pubs := commandsOf(ts.broker, (*proto.Command).GetPublish)
			if len(pubs) != 4 {
				t.Fatalf("%d publishes, want 4", len(pubs))
			}
			bare, mine, ret, inTx := pubs[0], pubs[1], pubs[2], pubs[3]
			received := func(p *proto.Publish) {
				t.Helper()
				ms := headerOf(p, "timestamp_in_ms").GetInt64()
				if ms < before.UnixMilli() || ms > after.UnixMilli() {
					t.Fatalf("%s: timestamp_in_ms %d, want the time it was published, %d to %d", p.GetBody(), ms, before.UnixMilli(), after.UnixMilli())
				}
				if s := p.GetProperties().GetTimestamp(); s != ms/1000 {
					t.Fatalf("%s: timestamp %d s, timestamp_in_ms %d", p.GetBody(), s, ms)
				}
				if n := string(headerOf(p, "x-routed-by").GetLongString()); n != "node-a" {
					t.Fatalf("%s: x-routed-by %q, want this node", p.GetBody(), n)
				}
			}
			if mode == StampOff {
				for _, p := range []*proto.Publish{bare, ret, inTx} {
					if p.GetProperties().GetHeaders() != nil || p.GetProperties().Timestamp != nil {
						t.Fatalf("%s: properties %v with the interceptors off", p.GetBody(), p.GetProperties())
					}
				}
			} else {
				for _, p := range []*proto.Publish{bare, ret, inTx} {
					received(p)
				}
			}
			switch mode {
			case StampOff, StampKeep:
				if headerOf(mine, "timestamp_in_ms").GetInt64() != 7 || string(headerOf(mine, "x-routed-by").GetLongString()) != "elsewhere" ||
					mine.GetProperties().GetTimestamp() != 1000 {
					t.Fatalf("the publisher's own values were not kept: %v", mine.GetProperties())
				}
			case StampOverwrite:
				received(mine)
			}
			if f := mine.GetProperties().GetHeaders().GetFields(); len(f) != 3 || headerOf(mine, "n").GetInt16() != 3 {
				t.Fatalf("the publisher's headers became %v", f)
			}

			select {
			case r := <-returns:
				ms, ok := r.Headers["timestamp_in_ms"]
				if ok != (mode != StampOff) || ok && ms != headerOf(ret, "timestamp_in_ms").GetInt64() {
					t.Fatalf("the return's headers %v, the publish's %v", r.Headers, ret.GetProperties().GetHeaders())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no basic.return")
			}
		})
	}
}
