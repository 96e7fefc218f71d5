package amqp

import (
	"context"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/raftmq/raftmq/amqp/wire"
	"github.com/raftmq/raftmq/proto"
)

func publishOrFatal(t *testing.T, ch *amqp091.Channel, key string, mandatory bool) {
	t.Helper()
	if err := ch.PublishWithContext(context.Background(), "", key, mandatory, false, amqp091.Publishing{Body: []byte("body-" + key)}); err != nil {
		t.Fatal(err)
	}
}

// syncChannel makes a round trip the channel's worker answers after
// everything sent before it.
func syncChannel(t *testing.T, ch *amqp091.Channel) {
	t.Helper()
	if err := ch.Qos(0, 0, false); err != nil {
		t.Fatal(err)
	}
}

func TestTx_CommitSendsTheTransactionInOrder(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if p := c.GetPublish(); p != nil {
			return &proto.Result{Routed: p.RoutingKey != "nowhere"}
		}
		return nil
	}, nil)
	_, ch := openChannel(t, ts)
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	d := consumeLogTags(t, ts, ch, "work", 7)[0]
	ts.broker.mu.Lock()
	ts.broker.cmds, ts.broker.batches = nil, nil
	ts.broker.mu.Unlock()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	publishOrFatal(t, ch, "q", false)
	if err := ch.Ack(d.DeliveryTag, false); err != nil {
		t.Fatal(err)
	}
	publishOrFatal(t, ch, "nowhere", true)
	syncChannel(t, ch)
	ts.broker.mu.Lock()
	n := len(ts.broker.cmds)
	ts.broker.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d commands before tx.commit", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	ts.broker.mu.Lock()
	batches := ts.broker.batches
	ts.broker.mu.Unlock()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("batches %v, want one of 3", batches)
	}
	b := batches[0]
	if b[0].GetPublish().GetRoutingKey() != "q" || !slices.Equal(b[1].GetSettle().GetTags(), []uint64{7}) || b[2].GetPublish().GetRoutingKey() != "nowhere" {
		t.Fatalf("batch %v", b)
	}
	select {
	case r := <-returns:
		if r.RoutingKey != "nowhere" || string(r.Body) != "body-nowhere" {
			t.Fatalf("return %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no basic.return for the unroutable mandatory message")
	}
}

func TestTx_RollbackForgetsTheTransaction(t *testing.T) {
	ts := startServer(t, Config{})
	_, ch := openChannel(t, ts)
	d := consumeLogTags(t, ts, ch, "work", 3)[0]
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	publishOrFatal(t, ch, "q", false)
	if err := ch.Nack(d.DeliveryTag, false, true); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	publishOrFatal(t, ch, "after", false)
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	pubs := commandsOf(ts.broker, (*proto.Command).GetPublish)
	if len(pubs) != 1 || pubs[0].RoutingKey != "after" {
		t.Fatalf("publishes %v, want only the committed one", pubs)
	}
	if n := len(commandsOf(ts.broker, (*proto.Command).GetRequeue)); n != 0 {
		t.Fatalf("%d rolled-back nacks reached the log", n)
	}
}

func TestTx_ModeErrors(t *testing.T) {
	ts := startServer(t, Config{})
	c, ch := openChannel(t, ts)
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	_ = ch.TxCommit()
	if e := mustClosedWith(t, closed, 406); e.Reason != "PRECONDITION_FAILED - channel is not transactional" {
		t.Fatalf("reason %q", e.Reason)
	}

	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed = ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	_ = ch.Tx()
	mustClosedWith(t, closed, 406)

	ch, err = c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed = ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	_ = ch.Confirm(false)
	mustClosedWith(t, closed, 406)
}

// Both sides close the channel at once: the server answers the client's
// channel.close and keeps the number until the close-ok of its own close,
// which is therefore not a frame on an unknown channel.
func TestChannel_SimultaneousClose(t *testing.T) {
	ts := startServer(t, Config{})
	ts.broker.script(func(c *proto.Command) *proto.Result {
		if c.GetPublish() != nil {
			return &proto.Result{Code: 404, Text: "NOT_FOUND - no exchange 'missing' in vhost '/'"}
		}
		return nil
	}, nil)
	rc := dialRaw(t, ts.addr)
	rc.handshake(0, 0)
	rc.send(1, &wire.ChannelOpen{})
	if _, ok := rc.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("no channel.open-ok")
	}
	rc.write(wire.AppendContent(nil, 1, &wire.BasicPublish{Exchange: "missing"}, &wire.Properties{}, []byte("x"), 4096))
	if m, ok := rc.method().(*wire.ChannelClose); !ok || m.ReplyCode != 404 {
		t.Fatalf("got %#v, want channel.close 404", m)
	}
	// The client's own close crossed the server's on the wire.
	rc.send(1, &wire.ChannelClose{ReplyCode: 200, ReplyText: "bye"})
	if m, ok := rc.method().(*wire.ChannelCloseOk); !ok {
		t.Fatalf("got %#v, want channel.close-ok", m)
	}
	rc.send(1, &wire.ChannelCloseOk{})
	rc.send(1, &wire.ChannelOpen{})
	if m, ok := rc.method().(*wire.ChannelOpenOk); !ok {
		t.Fatalf("got %#v, want channel.open-ok on the reused number", m)
	}
}
